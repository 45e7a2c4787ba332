// `policy explain` (all phases for one query) and `policy test` case files.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "sluice/policy/explain.hpp"
#include "sluice/policy/target.hpp"

namespace sluice::policy {

std::expected<Explanation, std::string> explain(const Matcher& matcher, const ExplainQuery& q) {
  Explanation ex;
  std::optional<IpAddress> ip;
  if (!q.ip.empty()) {
    ip = parseIpLiteral(q.ip);
    if (!ip) return std::unexpected("bad --ip '" + q.ip + "': not an IP address");
  }
  Target target;
  if (!q.url.empty()) {
    auto url = parseUrl(q.url);
    if (!url) return std::unexpected(url.error());
    target = url->target;
    std::string method = q.method.empty() ? "GET" : q.method;
    for (auto& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (url->scheme == "http") {
      ex.phase = "request";
      ex.decision = matcher.decideRequest(target, method, url->path);
      refusePlaintextInjection(ex.decision);
    } else {
      ex.phase = "connect";
      ex.decision = matcher.decideConnect(target, Visibility::kTunnel);
      if (ex.decision.allowed && ex.decision.tls == TlsMode::kInspect) {
        ex.phase = "request";
        Decision req = matcher.decideRequest(target, method, url->path);
        ex.decision = std::move(req);
        ex.decision.tls = TlsMode::kInspect;
      } else if (ex.decision.allowed) {
        ex.note = "passthrough tunnel: the proxy sees only " + target.authority() +
                  ", not the method or path";
      }
    }
  } else if (!q.connect.empty()) {
    auto t = parseAuthority(q.connect);
    if (!t) return std::unexpected(t.error());
    target = *t;
    ex.phase = "connect";
    ex.decision = matcher.decideConnect(target, Visibility::kTunnel);
  } else {
    return std::unexpected("give --url URL or --connect HOST:PORT");
  }
  if (ex.decision.allowed) {
    if (!ip && target.ip) ip = target.ip;
    if (ip) {
      Decision addr = matcher.decideAddress(ex.decision, target, *ip);
      if (!addr.allowed) ex.phase = "address";
      addr.tls = ex.decision.tls;
      ex.decision = std::move(addr);
    } else {
      ex.note += (ex.note.empty() ? "" : "; ") +
                 std::string(
                     "address not checked: pass --ip ADDR to apply the SSRF guard to the "
                     "address the host resolves to");
    }
  }
  if (ex.decision.allowed && ex.decision.rule) {
    for (const auto& [name, value] : ex.decision.rule->inject.headers) {
      ex.inject_headers.push_back(name);
    }
    ex.inject_secrets = ex.decision.rule->inject.secret_names;
  }
  return ex;
}

std::expected<PolicyTestSuite, LoadError> loadPolicyTestSuite(const std::filesystem::path& file) {
  LoadError err;
  auto fail = [&](const YAML::Mark& m, std::string msg) {
    SourcePos pos;
    if (m.line >= 0) pos = {m.line + 1, m.column + 1};
    err.diagnostics.push_back({file.string(), pos, std::move(msg)});
  };
  std::ifstream in(file);
  if (!in) {
    return std::unexpected(LoadError{{{file.string(), {}, "cannot read file"}}});
  }
  std::stringstream ss;
  ss << in.rdbuf();
  PolicyTestSuite suite;
  try {
    YAML::Node root = YAML::Load(ss.str());
    if (!root.IsMap()) {
      fail(root.Mark(), "a policy test file is a mapping with 'policy' and 'cases'");
      return std::unexpected(err);
    }
    for (auto it = root.begin(); it != root.end(); ++it) {
      auto key = it->first.Scalar();
      if (key != "policy" && key != "cases") fail(it->first.Mark(), "unknown key '" + key + "'");
    }
    if (!root["policy"] || !root["policy"].IsScalar()) {
      fail(root.Mark(), "missing 'policy: PATH' (relative to this file)");
    } else {
      suite.policy = file.parent_path() / root["policy"].Scalar();
    }
    const YAML::Node cases = root["cases"];
    if (!cases || !cases.IsSequence()) {
      fail(root.Mark(), "missing 'cases:' list");
    } else {
      static const std::set<std::string> kKeys = {"name", "url",    "connect", "method",
                                                  "ip",   "expect", "rule",    "reason"};
      for (const auto& c : cases) {
        PolicyTestCase tc;
        tc.pos = {c.Mark().line + 1, c.Mark().column + 1};
        if (!c.IsMap()) {
          fail(c.Mark(), "each case is a mapping");
          continue;
        }
        for (auto it = c.begin(); it != c.end(); ++it) {
          auto key = it->first.Scalar();
          if (!kKeys.count(key)) fail(it->first.Mark(), "unknown key '" + key + "' in case");
        }
        auto get = [&](const char* k) { return c[k] && c[k].IsScalar() ? c[k].Scalar() : ""; };
        tc.name = get("name");
        tc.query.url = get("url");
        tc.query.connect = get("connect");
        tc.query.method = get("method");
        tc.query.ip = get("ip");
        tc.expect_rule = get("rule");
        tc.expect_reason = get("reason");
        std::string expect = get("expect");
        if (tc.name.empty()) tc.name = "case at line " + std::to_string(tc.pos.line);
        if (tc.query.url.empty() == tc.query.connect.empty()) {
          fail(c.Mark(), "case '" + tc.name + "' needs exactly one of 'url' or 'connect'");
        }
        if (expect == "allow") {
          tc.expect_allow = true;
        } else if (expect != "deny") {
          fail(c["expect"] ? c["expect"].Mark() : c.Mark(),
               "case '" + tc.name + "': 'expect' must be allow or deny");
        }
        suite.cases.push_back(std::move(tc));
      }
    }
  } catch (const YAML::Exception& e) {
    fail(e.mark, e.msg);
  }
  if (!err.diagnostics.empty()) return std::unexpected(err);
  return suite;
}

}  // namespace sluice::policy
