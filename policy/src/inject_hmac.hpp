// `inject.hmac` in a rule's YAML: parsing and validation (loader.cpp calls it).
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "inject_parse.hpp"
#include "sluice/policy/diagnostics.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// Parses `inject.hmac` at `n`; problems go to the loader's diagnostics through `ctx`
/// (file:line:col), the key's secret name into `names`. nullopt when anything is wrong.
std::optional<HmacSigning> parseInjectHmac(const YAML::Node& n, std::set<std::string>& names,
                                           const InjectParseContext& ctx);

/// The variables a message template may name, in the order the docs list them.
inline constexpr std::string_view kHmacVariables[] = {"method",    "path",        "query",
                                                      "timestamp", "body_sha256", "body"};

}  // namespace sluice::policy
