// `policy explain` (all phases for one query) and `policy test` case files.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "sluice/policy/explain.hpp"
#include "sluice/policy/target.hpp"

namespace sluice::policy {

namespace {

bool addressLevel(const Decision& d) {
  return d.reason == Reason::kPrivateAddress || d.reason == Reason::kAddressNotInCidrs ||
         (d.reason == Reason::kDeniedByRule &&
          d.detail.find(" denies address ") != std::string::npos);
}

}  // namespace

std::expected<Explanation, std::string> explain(const Matcher& matcher, const ExplainQuery& q) {
  Explanation ex;
  std::optional<IpAddress> ip;
  if (!q.ip.empty()) {
    ip = parseIpLiteral(q.ip);
    if (!ip) return std::unexpected("bad --ip '" + q.ip + "': not an IP address");
  }
  Target target;
  std::optional<HttpRequest> request;
  bool plaintext = false;
  if (!q.url.empty()) {
    auto url = parseUrl(q.url);
    if (!url) return std::unexpected(url.error());
    target = url->target;
    plaintext = url->scheme == "http";
    // The same canonical form the proxy judges: a spelling it refuses is a deny here too.
    auto canon = canonicalRequest(q.method.empty() ? "GET" : q.method,
                                  url->query.empty() ? url->path : url->path + "?" + url->query);
    ex.phase = "request";
    if (!canon) {
      ex.decision.reason = canon.error().reason;
      ex.decision.detail = canon.error().detail;
      return ex;
    }
    request = std::move(*canon);
    ex.method = request->method;
    ex.path = request->path;
  } else if (!q.connect.empty()) {
    auto t = parseAuthority(q.connect);
    if (!t) return std::unexpected(t.error());
    target = *t;
  } else {
    return std::unexpected("give --url URL or --connect HOST:PORT");
  }
  if (!ip && target.ip) ip = target.ip;
  const IpAddress* addr = ip ? &*ip : nullptr;
  if (plaintext) {
    ex.decision = matcher.decide({target, Visibility::kPlainHttp, &*request, addr, true});
  } else {
    ex.phase = "connect";
    ex.decision = matcher.decide({target, Visibility::kTunnel, nullptr, addr});
    if (request && ex.decision.allowed && ex.decision.tls == TlsMode::kInspect) {
      // An ask rule under tls: inspect allows the tunnel and asks for each request.
      ex.phase = "request";
      ex.decision = matcher.decide({target, Visibility::kTunnel, &*request, addr});
      ex.decision.tls = TlsMode::kInspect;
    } else if (request && ex.decision.allowed) {
      ex.note = "passthrough tunnel: the proxy sees only " + target.authority() +
                ", not the method or path";
    }
  }
  if (addressLevel(ex.decision)) ex.phase = "address";
  const bool may_pass = ex.decision.allowed || ex.decision.ask;
  if (ex.decision.ask) {
    ex.note = "the proxy holds this " +
              std::string(ex.decision.rule && request && ex.phase != "connect" ? "request"
                                                                               : "connection") +
              " until an approver allows it (ask.timeout " +
              std::to_string(
                  (ex.decision.rule ? ex.decision.rule->ask_timeout : Rule{}.ask_timeout).count() /
                  1000) +
              "s, then approval_timeout)" + (ex.note.empty() ? "" : "; " + ex.note);
  }
  if (may_pass && !addr) {
    ex.note += (ex.note.empty() ? "" : "; ") +
               std::string(
                   "address not checked: pass --ip ADDR to apply the SSRF guard to the "
                   "address the host resolves to");
  }
  if (may_pass && ex.decision.rule) {
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
        if (expect == "allow" || expect == "deny" || expect == "ask") {
          tc.expect = expect;
        } else {
          fail(c["expect"] ? c["expect"].Mark() : c.Mark(),
               "case '" + tc.name + "': 'expect' must be allow, deny or ask");
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
