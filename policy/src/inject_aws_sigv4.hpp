// `inject.aws_sigv4` (AWS Signature Version 4 re-signing at the proxy): its YAML parsing and
// validation, called from the loader's `inject:` parsing (loader.cpp).
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/policy/workflow.hpp"

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

/// `inject.aws_sigv4: {access_key_id, secret_access_key, session_token?}`, each exactly one
/// `${secret:NAME}`. Sets `inject.aws_sigv4` and adds the secret names to `names`.
void parseInjectAwsSigv4(const YAML::Node& n, Inject& inject, std::set<std::string>& names,
                         const InjectParseContext& ctx);

/// Across a workflow's rules: at most one rule has `inject.aws_sigv4` (the sandbox has one
/// AWS_ACCESS_KEY_ID), and no `placeholder_env` names one of its variables.
void checkAwsSigv4Rules(const std::vector<Rule>& rules, const InjectParseContext& ctx);

/// The sandbox variables `inject.aws_sigv4` sets.
inline constexpr std::string_view kAwsSigv4Env[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                    "AWS_SESSION_TOKEN"};

}  // namespace sluice::policy
