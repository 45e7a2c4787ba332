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

// What a query names: the target, and the request when it gives a URL.
struct Subject {
  Target target;
  std::optional<HttpRequest> request;
  bool plaintext = false;  // an http:// URL
};

// --url or --connect. A URL whose request the proxy would refuse as written is decided at
// once: `ex` then holds that refusal and `refused` is set.
std::expected<Subject, std::string> parseSubject(const ExplainQuery& q, Explanation& ex,
                                                 bool& refused) {
  Subject s;
  if (q.url.empty()) {
    if (q.connect.empty()) return std::unexpected("give --url URL or --connect HOST:PORT");
    auto t = parseAuthority(q.connect);
    if (!t) return std::unexpected(t.error());
    s.target = *t;
    return s;
  }
  auto url = parseUrl(q.url);
  if (!url) return std::unexpected(url.error());
  s.target = url->target;
  s.plaintext = url->scheme == "http";
  // The same canonical form the proxy judges: a spelling it refuses is a deny here too.
  auto canon = canonicalRequest(q.method.empty() ? "GET" : q.method,
                                url->query.empty() ? url->path : url->path + "?" + url->query);
  ex.phase = "request";
  if (!canon) {
    ex.decision.reason = canon.error().reason;
    ex.decision.detail = canon.error().detail;
    refused = true;
    return s;
  }
  s.request = std::move(*canon);
  ex.method = s.request->method;
  ex.path = s.request->path;
  return s;
}

// The decision as the proxy reaches it: a plain HTTP request at once; otherwise the tunnel's
// CONNECT, then each request inside it when the tunnel is inspected.
void decidePhases(const Matcher& matcher, const Subject& s, const IpAddress* addr,
                  Explanation& ex) {
  const HttpRequest* request = s.request ? &*s.request : nullptr;
  if (s.plaintext) {
    ex.decision = matcher.decide({s.target, Visibility::kPlainHttp, request, addr, true});
    return;
  }
  ex.phase = "connect";
  ex.decision = matcher.decide({s.target, Visibility::kTunnel, nullptr, addr});
  if (request && ex.decision.allowed && ex.decision.tls == TlsMode::kInspect) {
    // An ask rule under tls: inspect allows the tunnel and asks for each request.
    ex.phase = "request";
    ex.decision = matcher.decide({s.target, Visibility::kTunnel, request, addr});
    ex.decision.tls = TlsMode::kInspect;
  } else if (request && ex.decision.allowed) {
    ex.note = "passthrough tunnel: the proxy sees only " + s.target.authority() +
              ", not the method or path";
  }
}

// The notes (an approver's wait, an address left unchecked) and what would be injected.
void describe(const Subject& s, const IpAddress* addr, Explanation& ex) {
  const bool may_pass = ex.decision.allowed || ex.decision.ask;
  if (ex.decision.ask) {
    const bool holds_request = ex.decision.rule && s.request && ex.phase != "connect";
    const auto timeout = (ex.decision.rule ? ex.decision.rule->ask_timeout : Rule{}.ask_timeout);
    ex.note = "the proxy holds this " + std::string(holds_request ? "request" : "connection") +
              " until an approver allows it (ask.timeout " +
              std::to_string(timeout.count() / 1000) + "s, then approval_timeout)" +
              (ex.note.empty() ? "" : "; " + ex.note);
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
    // A minted token (inject.oauth2, inject.google_service_account) goes in Authorization.
    if (ex.decision.rule->inject.mintsToken()) ex.inject_headers.push_back("Authorization");
    if (ex.decision.rule->inject.aws_sigv4) ex.inject_headers.push_back("aws_sigv4");
    ex.inject_secrets = ex.decision.rule->inject.secret_names;
  }
}

}  // namespace

std::expected<Explanation, std::string> explain(const Matcher& matcher, const ExplainQuery& q) {
  Explanation ex;
  std::optional<IpAddress> ip;
  if (!q.ip.empty()) {
    ip = parseIpLiteral(q.ip);
    if (!ip) return std::unexpected("bad --ip '" + q.ip + "': not an IP address");
  }
  bool refused = false;
  auto subject = parseSubject(q, ex, refused);
  if (!subject) return std::unexpected(subject.error());
  if (refused) return ex;
  if (!ip && subject->target.ip) ip = subject->target.ip;
  const IpAddress* addr = ip ? &*ip : nullptr;
  decidePhases(matcher, *subject, addr, ex);
  if (addressLevel(ex.decision)) ex.phase = "address";
  describe(*subject, addr, ex);
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
