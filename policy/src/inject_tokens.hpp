// Tokens minted at the proxy: the `inject.oauth2` and `inject.google_service_account` keys of a
// rule (docs/credentials.md), parsed and validated for the loader, and the check that every
// token endpoint a workflow names is allowed by one of its own rules.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "inject_parse.hpp"
#include "sluice/policy/diagnostics.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// Parses `inject.oauth2` and `inject.google_service_account` of the mapping `inject` into
/// `r.inject`, adding the secret names they reference to `names`.
void parseInjectTokens(const YAML::Node& inject, Rule& r, std::set<std::string>& names,
                       const InjectParseContext& kit);

/// One error per token endpoint no rule of `w` allows: a POST to it is decided as
/// `policy explain --url TOKEN_URL --method POST` would (the proxy's own fetch goes through the
/// same decision, with the address, at run time).
std::vector<Diagnostic> checkTokenEndpoints(const Workflow& w, const std::string& file);

}  // namespace sluice::policy
