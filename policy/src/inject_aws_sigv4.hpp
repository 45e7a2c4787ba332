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

#include "inject_parse.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

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
