// Host pattern and path pattern parsing shared by the loader and the matcher.
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "sluice/policy/workflow.hpp"

namespace sluice::policy::detail {

/// Parses one `hosts:` entry: exact name, `*.suffix` or `re:RE2`. Error text says why.
std::expected<HostPattern, std::string> parseHostPattern(std::string_view text);

/// True when `suffix` (no leading "*.") is a public suffix such as `com` or `co.uk`.
bool isPublicSuffix(std::string_view suffix);

/// Glob match for paths: `*` matches any run of characters (including '/'), `?` one.
bool globMatch(std::string_view pattern, std::string_view text);

}  // namespace sluice::policy::detail
