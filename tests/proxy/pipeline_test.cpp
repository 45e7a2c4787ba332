// One pipeline, every path: for every rule shape (host, cidrs, host+cidrs, methods, paths; allow
// and deny; with and without allow_private), a corpus of method and path spellings sent over
// every way a request can reach the proxy (fresh connection, reused connection, pipelined in one
// write, after an interim 1xx response, plain HTTP inside a CONNECT tunnel), each checked against
// `policy explain` (the same policy::explain that `sluice policy explain --json` prints) for the
// canonical request, and against what the upstream actually received. A randomized corpus with a
// fixed seed runs too (SLUICE_PIPELINE_FUZZ_ITERATIONS sets its size; `make fuzz` runs it longer).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "proxy_fixture.hpp"
#include "sluice/policy/explain.hpp"

namespace sluice::proxy::testing {
namespace {

enum class Path { kFresh, kReused, kPipelined, kAfterInterim, kTunnel };

const char* pathName(Path p) {
  switch (p) {
    case Path::kFresh:
      return "fresh";
    case Path::kReused:
      return "reused";
    case Path::kPipelined:
      return "pipelined";
    case Path::kAfterInterim:
      return "after-1xx";
    case Path::kTunnel:
      return "connect-http";
  }
  return "?";
}

// A rule shape: the rules of one workflow, and whether the warm-up request (GET /v1/warm) is
// allowed by them (the reused, pipelined, 1xx and tunnel paths need it to be).
struct Shape {
  const char* name;
  const char* rules;
  bool warm_allowed = true;
  bool ip_literal = false;  // address the upstream as 127.0.0.1 (cidrs-only rules match only that)
  bool asks = false;        // has ask rules: an approver answers (PipelineTest::approverSays)
};

const Shape kShapes[] = {
    {"host_cidrs_paths_deny_paths_methods",
     "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       allow_private: true, cidrs: [\"127.0.0.0/8\"], paths: [\"/v1/*\"]}\n"
     "    - {id: no-admin, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       paths: [\"/v1/admin/*\"]}\n"
     "    - {id: no-write, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       methods: [DELETE, PUT]}\n"},
    {"cidrs_only_deny_cidrs_methods",
     "    - {id: net, action: allow, cidrs: [\"127.0.0.0/8\"], allow_private: true,\n"
     "       ports: [\"1-65535\"]}\n"
     "    - {id: no-write, action: deny, cidrs: [\"127.0.0.1/32\"], ports: [\"1-65535\"],\n"
     "       methods: [DELETE, PUT]}\n"
     "    - {id: no-admin, action: deny, cidrs: [\"127.0.0.0/8\"], ports: [\"1-65535\"],\n"
     "       paths: [\"/admin/*\", \"/v1/admin/*\"]}\n",
     true, true},
    {"host_methods_deny_cidrs_paths",
     "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       allow_private: true, cidrs: [\"127.0.0.0/8\"], methods: [GET, POST]}\n"
     "    - {id: no-admin, action: deny, cidrs: [\"127.0.0.0/8\"], ports: [\"1-65535\"],\n"
     "       paths: [\"/v1/admin\", \"/v1/admin/*\"]}\n"},
    {"host_paths_without_allow_private",
     "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       paths: [\"/v1/*\"]}\n",
     false},
    // Approvals: the ask rule holds each request it matches until the approver answers; deny
    // rules still beat it, the allow rule it overlaps does not.
    {"ask_paths_deny_paths_methods",
     "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
     "    - {id: ask-v1, action: ask, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       allow_private: true, cidrs: [\"127.0.0.0/8\"], paths: [\"/v1/*\"]}\n"
     "    - {id: no-admin, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       paths: [\"/v1/admin/*\"]}\n"
     "    - {id: no-write, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
     "       methods: [DELETE, PUT]}\n",
     true, false, true},
    {"ask_cidrs_only_deny_methods",
     "    - {id: ask-net, action: ask, cidrs: [\"127.0.0.0/8\"], allow_private: true,\n"
     "       ports: [\"1-65535\"], methods: [GET, POST]}\n"
     "    - {id: no-admin, action: deny, cidrs: [\"127.0.0.0/8\"], ports: [\"1-65535\"],\n"
     "       paths: [\"/admin/*\", \"/v1/admin/*\"]}\n",
     true, true, true},
};

class PipelineTest : public ProxyFixture {
 protected:
  virtual const Shape& shape() const { return kShapes[0]; }

  // The approver of the ask shapes: allows GET of /v1/ok and /v1/warm (and what lies below
  // them), refuses everything else, so that both answers cross every path.
  static bool approverSays(const std::string& method, const std::string& path) {
    return method == "GET" && (path.rfind("/v1/ok", 0) == 0 || path.rfind("/v1/warm", 0) == 0);
  }
  bool wantApprovals() const override { return shape().asks; }
  void approve(const Approval& a) override {
    ASSERT_TRUE(a.method && a.path) << "an HTTP request is approved with its method and path";
    approvals_->answer(a.id, approverSays(*a.method, *a.path), Scope::kOnce, "test");
  }
  std::string policyYaml() override {
    return std::string("apiVersion: sluice/v1\nkind: Workflow\nname: pipeline\negress:\n") +
           "  rules:\n" + shape().rules + "  limits: {max_requests: 1000000}\n";
  }

  virtual std::string authority() const {
    return shape().ip_literal ? "127.0.0.1:" + std::to_string(up_.httpPort()) : upstream();
  }

  std::string request(const std::string& method, const std::string& target, bool absolute,
                      const std::string& extra = "") {
    std::string t = absolute ? "http://" + authority() + target : target;
    return method + " " + t + " HTTP/1.1\r\nHost: " + authority() + "\r\n" + extra +
           "Content-Length: 0\r\n\r\n";
  }

  // What explain says for (method, path) at the upstream's address.
  policy::Explanation explainOf(const std::string& method, const std::string& path) {
    policy::ExplainQuery q;
    q.url = "http://" + authority() + path;
    q.method = method;
    q.ip = "127.0.0.1";
    auto ex = policy::explain(*matcher_, q);
    EXPECT_TRUE(ex) << path << ": " << (ex ? "" : ex.error());
    return ex ? *ex : policy::Explanation{};
  }

  std::size_t upstreamCount() {
    std::lock_guard lock(up_.httpLog().mu);
    return up_.httpLog().request_heads.size();
  }
  std::string lastUpstreamHead() {
    std::lock_guard lock(up_.httpLog().mu);
    return up_.httpLog().request_heads.empty() ? "" : up_.httpLog().request_heads.back();
  }

  // Sends (method, path) over `how`; returns the proxy's answer to it.
  Response send(Path how, const std::string& method, const std::string& path) {
    Client c(port_);
    EXPECT_TRUE(c.ok());
    const std::string warmup = request("GET", "/v1/warm", how != Path::kTunnel);
    switch (how) {
      case Path::kFresh:
        c.send(request(method, path, true));
        return c.readResponse();
      case Path::kReused: {
        c.send(warmup);
        auto w = c.readResponse();
        EXPECT_EQ(w.status, 200);
        c.send(request(method, path, true));
        return c.readResponse();
      }
      case Path::kPipelined: {
        c.send(warmup + request(method, path, true));
        auto w = c.readResponse();
        EXPECT_EQ(w.status, 200);
        return c.readResponse();
      }
      case Path::kAfterInterim: {
        c.send(request("GET", "/v1/warm", true, "X-Test-Interim: 1\r\n"));
        EXPECT_EQ(c.readResponse().status, 103);
        EXPECT_EQ(c.readResponse().status, 200);
        c.send(request(method, path, true));
        return c.readResponse();
      }
      case Path::kTunnel: {
        c.send(connectRequest(authority()));
        auto established = c.readResponse(true);
        EXPECT_EQ(established.status, 200);
        c.send(warmup + request(method, path, false));
        auto w = c.readResponse();
        EXPECT_EQ(w.status, 200);
        return c.readResponse();
      }
    }
    return {};
  }

  // The invariant: the proxy did what explain says, and the upstream saw only that.
  void check(Path how, const std::string& method, const std::string& path) {
    SCOPED_TRACE(std::string(pathName(how)) + " " + method + " " + path);
    auto ex = explainOf(method, path);
    const std::size_t before = upstreamCount();
    auto r = send(how, method, path);
    const std::size_t warm = how == Path::kFresh ? 0 : 1;
    // An ask is what the approver makes of the canonical request.
    const bool approved = ex.decision.ask && approverSays(method, ex.path);
    if (ex.decision.ask && !approved) {
      ex.decision.reason = policy::Reason::kApprovalDenied;
    }
    if (ex.decision.allowed || approved) {
      EXPECT_EQ(r.status, 200) << r.body;
      // Every request the upstream saw was on record (forwards) before it was sent.
      EXPECT_EQ(sink_->forwards().size(), upstreamCount());
      ASSERT_EQ(upstreamCount(), before + warm + 1);
      // The upstream got exactly the canonical request explain judged (the query as sent).
      auto q = path.find('?');
      std::string target = ex.path + (q == std::string::npos ? "" : path.substr(q));
      EXPECT_EQ(lastUpstreamHead().rfind(method + " " + target + "\n", 0), 0u)
          << lastUpstreamHead();
    } else {
      EXPECT_GE(r.status, 400) << r.body;
      EXPECT_LT(r.status, 500) << r.body;
      EXPECT_EQ(r.header("x-sluice-reason"), policy::reasonName(ex.decision.reason)) << r.body;
      EXPECT_EQ(upstreamCount(), before + warm)
          << "a refused request reached the upstream: " << lastUpstreamHead();
    }
  }
};

const std::vector<std::string>& pathCorpus() {
  static const std::vector<std::string> corpus = {
      "/v1/ok", "/v1/../admin/x", "/v1/%2e%2e/admin/x", "/v1/..%2fadmin/x",
      "/v1/ok.txt;/../../admin/x", "/v1//admin/x", "/v1/./admin/x", "/v1/%61dmin/x",
      "/v1/..;/admin/x", "/v1/a%5cb", "/v1/%00", "/v1/%7Euser/./a", "/v1/admin", "/v1/admin/",
      "/v2/x", "/v1/a/b/../c?q=%2f", "/V1/ok", "/v1/%2E/x",
      // Ambiguous spellings.
      "/v1/admin;x/users", "/v1/admin;/users", "/v1/ok;jsessionid=1", "/v1/%C0%AE%C0%AE/admin/x",
      "/v1/%ff", "/v1/%0a", "/v1/%7f", "/admin./x", "/v1/admin./x", "/admin%20/x", "/.../x",
      "/V1/ADMIN/x"};
  return corpus;
}

class PipelineMatrix : public PipelineTest, public ::testing::WithParamInterface<Shape> {
 protected:
  const Shape& shape() const override { return GetParam(); }
};

TEST_P(PipelineMatrix, EveryPathDecidesAsExplainSays) {
  for (Path how :
       {Path::kFresh, Path::kReused, Path::kPipelined, Path::kAfterInterim, Path::kTunnel}) {
    if (!shape().warm_allowed && how != Path::kFresh) continue;
    for (const char* method : {"GET", "POST", "DELETE", "get"}) {
      for (const auto& path : pathCorpus()) check(how, method, path);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RuleShapes, PipelineMatrix, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.name);
                         });

// Each ambiguous spelling, over every carrier, against a raw upstream that logs
// every byte it receives. upstream.test has an allow rule without path_params; other.test one
// with path_params: allow; the deny rule (paths_case: insensitive) covers both.
struct Spelling {
  const char* host;
  const char* path;
  int status;          // what the client gets
  const char* reason;  // x-sluice-reason of a refusal; "" when forwarded
};

const Spelling kSpellings[] = {
    {"upstream.test", "/v1/data;x/users", 400, "ambiguous_target"},
    {"upstream.test", "/v1/data;/users", 400, "ambiguous_target"},
    {"upstream.test", "/v1/admin;x/users", 403, "denied_by_rule"},  // routed as /v1/admin/users
    {"upstream.test", "/v1/admin;/users", 403, "denied_by_rule"},
    {"upstream.test", "/v1/%C0%AE%C0%AE/admin/users", 400, "ambiguous_target"},  // overlong ".."
    {"upstream.test", "/v1/%c0%ae/x", 400, "ambiguous_target"},
    {"upstream.test", "/v1/%ff/x", 400, "ambiguous_target"},     // not UTF-8
    {"upstream.test", "/v1/%C2%85/x", 400, "ambiguous_target"},  // a C1 control
    {"upstream.test", "/v1/%0a/x", 400, "ambiguous_target"},
    {"upstream.test", "/v1/%00/x", 400, "ambiguous_target"},
    {"upstream.test", "/v1/%7f/x", 400, "ambiguous_target"},
    {"upstream.test", "/admin./x", 400, "ambiguous_target"},
    {"upstream.test", "/v1/admin./users", 400, "ambiguous_target"},  // IIS opens /v1/admin
    {"upstream.test", "/admin%20/x", 400, "ambiguous_target"},
    {"upstream.test", "/v1/admin%20/users", 400, "ambiguous_target"},
    {"upstream.test", "/admin /x", 400, "invalid_request"},  // a raw space ends the target
    {"upstream.test", "/.../x", 400, "ambiguous_target"},
    {"upstream.test", "/v1/.../admin/users", 400, "ambiguous_target"},
    {"upstream.test", "/V1/ADMIN/users", 403, "denied_by_rule"},  // paths_case: insensitive
    {"upstream.test", "/V1/Admin;x/users", 403, "denied_by_rule"},
    {"upstream.test", "/v1/data/users", 200, ""},
    {"other.test", "/v1/data;jsessionid=A1/x", 200, ""},  // forwarded as written
    {"other.test", "/v1/data;/users", 200, ""},
    {"other.test", "/v1/admin;x/users", 403, "denied_by_rule"},  // denied in the stripped form
    {"other.test", "/v1/ADMIN;x/users", 403, "denied_by_rule"},
    {"other.test", "/v1/%C0%AE/x", 400, "ambiguous_target"},
    {"other.test", "/admin./x", 400, "ambiguous_target"},
};

class AmbiguousSpellingTest : public PipelineTest {
 protected:
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: spellings\negress:\n  rules:\n"
           "    - {id: strict, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
           "    - {id: lax, action: allow, hosts: [other.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"], path_params: allow}\n"
           "    - {id: no-admin, action: deny, hosts: [upstream.test, other.test],\n"
           "       ports: [\"1-65535\"], paths: [\"/v1/admin/*\"], paths_case: insensitive}\n";
  }
  std::string authority() const override { return host_ + ":" + std::to_string(raw_.port()); }

  // One spelling over one carrier: the answer, explain's answer, and what the upstream got.
  void check(Path how, const Spelling& s) {
    SCOPED_TRACE(std::string(pathName(how)) + " " + s.host + s.path);
    host_ = s.host;
    const std::size_t bytes_before = raw_.received().size();
    const std::size_t lines_before = raw_.requestLines().size();
    auto r = send(how, "GET", s.path);
    const std::size_t warm = how == Path::kFresh ? 0 : 1;
    EXPECT_EQ(r.status, s.status) << r.body;
    auto lines = raw_.requestLines();
    if (s.status == 200) {
      ASSERT_EQ(lines.size(), lines_before + warm + 1);
      EXPECT_EQ(lines.back(), std::string("GET ") + s.path + " HTTP/1.1");  // byte for byte
      return;
    }
    EXPECT_EQ(r.header("x-sluice-reason"), s.reason) << r.body;
    EXPECT_EQ(lines.size(), lines_before + warm) << "a refused request reached the upstream";
    // Not a byte of it: the upstream saw only the warm-up (if any) since.
    const std::string since = raw_.received().substr(bytes_before);
    EXPECT_EQ(since.find(s.path), std::string::npos) << since;
    if (std::string(s.path).find(' ') != std::string::npos) return;  // no URL to explain
    // policy explain gives the same answer.
    policy::ExplainQuery q{"http://" + authority() + s.path, "", "GET", "127.0.0.1"};
    auto ex = policy::explain(*matcher_, q);
    ASSERT_TRUE(ex) << ex.error();
    EXPECT_EQ(policy::reasonName(ex->decision.reason), std::string(s.reason));
  }

  RawUpstream raw_;
  std::string host_ = "upstream.test";
};

TEST_F(AmbiguousSpellingTest, EverySpellingOverEveryCarrierAgainstARawUpstream) {
  for (Path how :
       {Path::kFresh, Path::kReused, Path::kPipelined, Path::kAfterInterim, Path::kTunnel}) {
    for (const auto& s : kSpellings) check(how, s);
  }
}

// Finding 1 of the issue: on one kept-alive connection, a deny rule applies to the second
// request as it does to a fresh one.
TEST_F(PipelineTest, KeepAliveCannotSkipADeny) {
  Client c(port_);
  c.send(request("GET", "/v1/ok", true));
  EXPECT_EQ(c.readResponse().status, 200);
  c.send(request("DELETE", "/v1/ok", true));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "denied_by_rule");
  EXPECT_EQ(upstreamCount(), 1u);
}

// Finding 4: a GET whose body holds a second request is refused; the hidden request never
// reaches the upstream.
TEST_F(PipelineTest, BodyOnGetIsRefused) {
  std::string hidden = "GET /v1/admin/secret HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string a = authority();
  auto r = roundTrip("GET http://" + a + "/v1/ok HTTP/1.1\r\nHost: " + a +
                     "\r\nContent-Length: " + std::to_string(hidden.size()) + "\r\n\r\n" + hidden);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.header("x-sluice-reason"), "body_not_allowed");
  EXPECT_EQ(upstreamCount(), 0u);
}

TEST_F(PipelineTest, RandomizedSpellingsDecideAsExplainSays) {
  int iterations = 200;
  if (const char* env = std::getenv("SLUICE_PIPELINE_FUZZ_ITERATIONS")) iterations = std::atoi(env);
  std::mt19937 rng(20261122);
  static const char* kSegments[] = {"v1",  "admin", "..", ".",     "%2e", "%2E%2e", "%61dmin",
                                    "a;b", "..;",   "",   "x%2fy", "%7e", "ok",     "%41"};
  static const char* kMethods[] = {"GET", "POST", "DELETE", "PUT", "get"};
  static const Path kPaths[] = {Path::kFresh, Path::kReused, Path::kPipelined, Path::kAfterInterim,
                                Path::kTunnel};
  for (int i = 0; i < iterations; ++i) {
    std::string path;
    int n = 1 + static_cast<int>(rng() % 5);
    for (int s = 0; s < n; ++s) path += std::string("/") + kSegments[rng() % std::size(kSegments)];
    check(kPaths[rng() % std::size(kPaths)], kMethods[rng() % std::size(kMethods)], path);
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace sluice::proxy::testing
