// `policy explain` and `policy test`: one query through every phase the proxy would apply,
// and YAML files of expected decisions that security teams keep in their own CI.
#pragma once

#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sluice/policy/diagnostics.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::policy {

/// What to decide: a URL (with a method) or a CONNECT authority, and optionally the address
/// the proxy would have resolved the host to.
struct ExplainQuery {
  std::string url;      // http(s)://host[:port]/path
  std::string connect;  // host:port
  std::string method;   // default GET for URLs
  std::string ip;       // apply the SSRF guard to this address
};

struct Explanation {
  Decision decision;
  std::vector<std::string> inject_headers;  // header names (and "aws_sigv4"), never values
  std::vector<std::string> inject_secrets;  // secret names only
  std::string phase;                        // "connect" | "request" | "address"
  std::string method;                       // the canonical request judged (URL queries)
  std::string path;
  std::string note;  // e.g. "address not checked: pass --ip"
};

/// Decides the query as the proxy would, through the same Matcher::decide call and on the same
/// canonical request (a spelling the proxy refuses is a deny with that reason here). Errors
/// are malformed queries (bad URL, authority or address).
std::expected<Explanation, std::string> explain(const Matcher& matcher, const ExplainQuery& q);

/// One case of a policy test file.
struct PolicyTestCase {
  std::string name;
  ExplainQuery query;
  std::string expect;         // allow | deny | ask
  std::string expect_rule;    // empty: not checked
  std::string expect_reason;  // empty: not checked
  SourcePos pos;
};

struct PolicyTestSuite {
  std::filesystem::path policy;  // resolved relative to the test file
  std::vector<PolicyTestCase> cases;
};

/// Loads `policy: PATH` + `cases: [...]`; problems reported as FILE:LINE:COL.
std::expected<PolicyTestSuite, LoadError> loadPolicyTestSuite(const std::filesystem::path& file);

}  // namespace sluice::policy
