// What the parser of one `inject:` key, in its own file (inject_*.cpp), borrows from the
// loader (loader.cpp's injectContext()): its diagnostics (FILE:LINE:COL), its mapping check and
// its `${secret:NAME}` template check.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include "sluice/policy/diagnostics.hpp"

namespace sluice::policy {

/// What a parser of one `inject:` key borrows from the loader: its diagnostics and checks.
struct InjectParseContext {
  std::function<void(const YAML::Node&, std::string)> error;
  std::function<void(SourcePos, std::string)> error_at;
  /// Unknown and duplicate keys of a mapping; false when it is not a mapping.
  std::function<bool(const YAML::Node&, std::string_view, std::initializer_list<std::string_view>)>
      check_map;
  /// Validates the `${secret:NAME}` references of a template, adding the names to the set.
  std::function<void(const YAML::Node&, const std::string&, std::set<std::string>&)>
      secret_template;
};

}  // namespace sluice::policy
