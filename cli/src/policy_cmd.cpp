// `sluice policy check | explain | test`: the tools a security team uses to write, review and
// keep honest its workflow policies.
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "sluice/base/json.hpp"
#include "sluice/policy/explain.hpp"
#include "sluice/policy/explain_json.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/units.hpp"

namespace sluice::cli {
namespace {

namespace pol = sluice::policy;

int runCheck(const std::vector<std::string>& paths) {
  int problems = 0;
  for (const auto& path : paths) {
    auto set = pol::loadPolicyPath(path);
    if (!set) {
      for (const auto& d : set.error().diagnostics) std::cout << d.str() << "\n";
      problems += static_cast<int>(set.error().diagnostics.size());
      continue;
    }
    for (const auto& [name, w] : set->workflows) {
      for (const auto& d : w->warnings) std::cout << d.str() << "\n";
      std::size_t allow = 0, deny = 0;
      std::size_t ask = 0;
      for (const auto& r : w->rules)
        (r.action == pol::Action::kAllow ? allow : r.action == pol::Action::kAsk ? ask : deny)++;
      std::cout << "ok " << name << " (" << w->source_path << "): " << allow << " allow, "
                << (ask ? std::to_string(ask) + " ask, " : std::string()) << deny
                << " deny rules; network " << pol::networkModeName(w->sandbox.network)
                << "; timeout " << pol::formatDuration(w->sandbox.timeout) << ", memory "
                << pol::formatSize(w->sandbox.memory) << "; sha256 " << w->sha256.substr(0, 12)
                << "\n";
    }
  }
  if (problems > 0) {
    std::cerr << "policy check: " << problems << (problems == 1 ? " problem" : " problems") << "\n";
    return 1;
  }
  return 0;
}

std::expected<std::shared_ptr<const pol::Matcher>, std::string> loadMatcher(
    const std::string& path) {
  auto set = pol::loadPolicyPath(path);
  if (!set) return std::unexpected(set.error().str());
  if (set->workflows.size() != 1) {
    return std::unexpected(path + ": holds " + std::to_string(set->workflows.size()) +
                           " workflows; name one file\n");
  }
  return pol::Matcher::compile(set->workflows.begin()->second);
}

struct ExplainOptions {
  std::string policy;
  pol::ExplainQuery query;
  std::string transparent;  // HOST:PORT of a redirected connection (transparent capture)
  std::string dns;          // a name the sandbox looks up through sluice's DNS
  bool json = false;
};

// `--dns NAME`: what sluice's DNS answers the sandbox (docs/proxy.md, "sluice's DNS").
int explainDns(const pol::Matcher& m, const std::string& name, bool json) {
  const bool allowed = m.nameMayBeAllowed(name);
  const char* answer = allowed ? "a synthetic address (198.18.0.0/15, 64:ff9b:1::/48)" : "NXDOMAIN";
  if (json) {
    nlohmann::json j = {{"decision", allowed ? "allow" : "deny"},
                        {"workflow", m.workflow().name},
                        {"name", name},
                        {"answer", allowed ? "synthetic" : "nxdomain"},
                        {"path", "dns"}};
    std::cout << base::dumpJson(j) << "\n";
  } else {
    std::cout << "decision:     " << (allowed ? "allow" : "deny") << "\n"
              << "workflow:     " << m.workflow().name << "\n"
              << "name:         " << name << "\n"
              << "answer:       " << answer << "\n"
              << "note:         "
              << (allowed ? "an allow rule could match this name; the connection that follows is "
                            "decided in full (port, cidrs, methods, paths)"
                          : "no allow rule could match this name (on any port); nothing is "
                            "forwarded to a real resolver")
              << "\n";
  }
  return allowed ? 0 : 1;
}

int runExplain(const ExplainOptions& o) {
  auto matcher = loadMatcher(o.policy);
  if (!matcher) {
    std::cerr << matcher.error();
    return 2;
  }
  if (!o.dns.empty()) return explainDns(**matcher, o.dns, o.json);
  pol::ExplainQuery q = o.query;
  // A redirected connection is decided as CONNECT to its host and original port (docs/proxy.md,
  // "Transparent capture"); HOST is the name the DNS map, SNI or Host gives, else the address.
  if (!o.transparent.empty()) q.connect = o.transparent;
  auto ex = pol::explain(**matcher, q);
  if (!ex) {
    std::cerr << "sluice policy explain: " << ex.error() << "\n";
    return 2;
  }
  const auto& d = ex->decision;
  if (o.json) {
    auto j = policy::explanationJson(*ex, (*matcher)->workflow().name);
    if (!o.transparent.empty()) j["path"] = "transparent";
    std::cout << base::dumpJson(j) << "\n";
  } else {
    std::cout << "decision:     " << pol::decisionName(d) << "\n"
              << "workflow:     " << (*matcher)->workflow().name << "\n"
              << "rule:         " << (d.rule_id.empty() ? "-" : d.rule_id) << "\n"
              << "reason:       " << pol::reasonName(d.reason) << "\n"
              << "detail:       " << d.detail << "\n";
    if (!ex->path.empty())
      std::cout << "request:      " << ex->method << " " << ex->path << " (canonical form)\n";
    if (!d.nearest_miss.empty()) std::cout << "nearest miss: " << d.nearest_miss << "\n";
    if (d.allowed || d.ask) std::cout << "tls:          " << pol::tlsModeName(d.tls) << "\n";
    if (!ex->inject_headers.empty()) {
      std::cout << "inject:       ";
      for (std::size_t i = 0; i < ex->inject_headers.size(); ++i) {
        std::cout << (i ? ", " : "") << ex->inject_headers[i];
      }
      std::cout << " (secrets:";
      for (const auto& s : ex->inject_secrets) std::cout << " " << s;
      std::cout << ")\n";
    }
    if (!ex->note.empty()) std::cout << "note:         " << ex->note << "\n";
    if (!o.transparent.empty())
      std::cout << "path:         transparent capture (decided as CONNECT " << o.transparent
                << "; refused connections are reset)\n";
  }
  return d.allowed ? 0 : d.ask ? 3 : 1;
}

int runTest(const std::vector<std::string>& files) {
  int passed = 0, failed = 0, errors = 0;
  for (const auto& file : files) {
    auto suite = pol::loadPolicyTestSuite(file);
    if (!suite) {
      std::cerr << suite.error().str();
      ++errors;
      continue;
    }
    auto matcher = loadMatcher(suite->policy.string());
    if (!matcher) {
      std::cerr << matcher.error();
      ++errors;
      continue;
    }
    for (const auto& tc : suite->cases) {
      auto ex = pol::explain(**matcher, tc.query);
      std::string where =
          file + ":" + std::to_string(tc.pos.line) + ":" + std::to_string(tc.pos.column);
      if (!ex) {
        std::cout << "FAIL " << tc.name << " (" << where << "): " << ex.error() << "\n";
        ++failed;
        continue;
      }
      const auto& d = ex->decision;
      bool ok = pol::decisionName(d) == tc.expect &&
                (tc.expect_rule.empty() || tc.expect_rule == d.rule_id) &&
                (tc.expect_reason.empty() || tc.expect_reason == pol::reasonName(d.reason));
      if (ok) {
        ++passed;
        continue;
      }
      ++failed;
      std::cout << "FAIL " << tc.name << " (" << where << ")\n"
                << "  expected: " << tc.expect;
      if (!tc.expect_rule.empty()) std::cout << " rule " << tc.expect_rule;
      if (!tc.expect_reason.empty()) std::cout << " reason " << tc.expect_reason;
      std::cout << "\n  actual:   " << pol::decisionName(d) << " rule "
                << (d.rule_id.empty() ? "-" : d.rule_id) << " reason " << pol::reasonName(d.reason)
                << "\n  detail:   " << d.detail << "\n";
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  if (errors > 0) return 2;
  return failed > 0 ? 1 : 0;
}

}  // namespace

void addPolicyCommands(CLI::App& app, int& exit_code) {
  auto* policy = app.add_subcommand("policy", "Check, explain and test workflow policies");
  policy->require_subcommand(1);

  auto check_paths = std::make_shared<std::vector<std::string>>();
  auto* check = policy->add_subcommand(
      "check", "Validate policy files; exit 0, or 1 with FILE:LINE:COL: message per problem");
  check->add_option("paths", *check_paths, "Policy files or directories")->required();
  check->callback([&exit_code, check_paths] { exit_code = runCheck(*check_paths); });

  auto ex = std::make_shared<ExplainOptions>();
  auto* explain = policy->add_subcommand(
      "explain", "Decide one request as the proxy would; exit 0 allow, 1 deny, 2 error, 3 ask");
  explain->add_option("--policy", ex->policy, "Workflow policy file")->required();
  auto* url = explain->add_option("--url", ex->query.url, "Request URL (http:// or https://)");
  auto* connect = explain->add_option("--connect", ex->query.connect, "CONNECT target HOST:PORT");
  auto* transparent = explain->add_option(
      "--transparent", ex->transparent,
      "A connection the sandbox made to HOST:PORT without the proxy (transparent capture)");
  auto* dns = explain->add_option("--dns", ex->dns, "A name the sandbox looks up (sluice's DNS)");
  url->excludes(connect);
  url->excludes(transparent);
  connect->excludes(transparent);
  for (auto* other : {url, connect, transparent}) dns->excludes(other);
  explain->add_option("--method", ex->query.method, "HTTP method (default GET)");
  explain->add_option("--ip", ex->query.ip,
                      "Address the host resolves to: applies the SSRF guard as the proxy would");
  explain->add_flag("--json", ex->json, "Print one JSON object");
  explain->callback([&exit_code, ex] {
    if (ex->query.url.empty() && ex->query.connect.empty() && ex->transparent.empty() &&
        ex->dns.empty()) {
      std::cerr << "sluice policy explain: give --url URL, --connect HOST:PORT, --transparent "
                   "HOST:PORT or --dns NAME\n";
      exit_code = 2;
      return;
    }
    exit_code = runExplain(*ex);
  });

  auto test_files = std::make_shared<std::vector<std::string>>();
  auto* test =
      policy->add_subcommand("test", "Run YAML cases of expected decisions; exit 1 if any fails");
  test->add_option("files", *test_files, "Policy test files")->required();
  test->callback([&exit_code, test_files] { exit_code = runTest(*test_files); });

  addPolicyHistoryCommands(*policy, exit_code);
}

}  // namespace sluice::cli
