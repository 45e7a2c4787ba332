// A shadow policy and learn mode through the proxy against loopback upstreams: every row
// records what the candidate decides (and the traffic is what the live policy decides), and a
// learning listener lets through what no rule explicitly refuses as would_deny while deny rules
// and the address guard still refuse.
#include <gtest/gtest.h>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

// The candidate: upstream.test for GET only, nothing for other.test.
std::string candidatePolicy() {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: candidate\negress:\n  rules:\n"
         "    - id: get-only\n      action: allow\n      hosts: [upstream.test]\n"
         "      ports: [\"1-65535\"]\n      methods: [GET]\n"
         "      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n";
}

// Only GET /v1/* on upstream.test, and an explicit deny of /admin/*.
std::string learnPolicy() {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: learning\negress:\n  rules:\n"
         "    - id: items\n      action: allow\n      hosts: [upstream.test, other.test]\n"
         "      ports: [\"1-65535\"]\n      methods: [GET]\n      paths: [\"/v1/*\"]\n"
         "      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n"
         "    - id: no-admin\n      action: deny\n      hosts: [upstream.test]\n"
         "      paths: [\"/admin/*\"]\n      ports: [\"1-65535\"]\n";
}

class ShadowLearnTest : public ProxyFixture {
 protected:
  // A second listener on the same proxy: `identity` with the fixture's execution id replaced.
  std::uint16_t listen(ListenerIdentity identity) {
    auto port = proxy_->listen("127.0.0.1", 0, std::move(identity));
    EXPECT_TRUE(port) << port.error().message;
    return port ? *port : 0;
  }
  std::optional<audit::RequestEvent> request(const std::string& exec, const std::string& method,
                                             const std::string& path) {
    return sink_->waitRequest([&](const audit::RequestEvent& e) {
      return e.execution_id == exec && e.method == method && e.path == path;
    });
  }
};

TEST_F(ShadowLearnTest, RowsRecordTheCandidatesDecisionAndTrafficIsUnaffected) {
  ListenerIdentity id{"exec-shadow", matcher_};
  id.shadow = compileWorkflow(candidatePolicy());
  const std::uint16_t port = listen(id);
  const std::string up = upstream();
  {  // fresh connections: a GET both allow, a POST only the live policy allows
    Client c(port);
    ASSERT_TRUE(c.send(getRequest(up, "/a", "Connection: close\r\n")));
    EXPECT_EQ(c.readResponse().status, 200);
    Client p(port);
    ASSERT_TRUE(
        p.send(getRequest(up, "/b", "Content-Length: 1\r\nConnection: close\r\n", "POST") + "x"));
    EXPECT_EQ(p.readResponse().status, 200);
  }
  {  // kept alive: two requests on one connection, the second one the candidate refuses
    Client k(port);
    ASSERT_TRUE(k.send(getRequest(up, "/k1")));
    EXPECT_EQ(k.readResponse().status, 200);
    ASSERT_TRUE(k.send(getRequest(up, "/k2", "Connection: close\r\n", "DELETE")));
    EXPECT_EQ(k.readResponse().status, 403);  // the live policy's no-delete
  }
  {  // a tunnel the candidate has no rule for
    Client t(port);
    ASSERT_TRUE(t.send(connectRequest(echo())));
    ASSERT_EQ(t.readResponse(true).status, 200);
    ASSERT_TRUE(t.send("ping"));
    EXPECT_EQ(t.readN(4), "ping");
  }
  auto a = request("exec-shadow", "GET", "/a");
  auto b = request("exec-shadow", "POST", "/b");
  auto k1 = request("exec-shadow", "GET", "/k1");
  auto k2 = request("exec-shadow", "DELETE", "/k2");
  ASSERT_TRUE(a && b && k1 && k2);
  EXPECT_EQ(a->decision, audit::Decision::kAllow);
  EXPECT_EQ(a->stamp.shadow_decision, audit::Verdict::kAllow);
  EXPECT_EQ(a->stamp.shadow_rule, "get-only");
  EXPECT_EQ(b->decision, audit::Decision::kAllow);
  EXPECT_EQ(b->stamp.shadow_decision, audit::Verdict::kDeny);
  EXPECT_EQ(b->stamp.shadow_rule, "get-only");  // its nearest miss
  EXPECT_EQ(k1->stamp.shadow_decision, audit::Verdict::kAllow);
  EXPECT_EQ(k2->decision, audit::Decision::kDeny);
  EXPECT_EQ(k2->stamp.shadow_decision, audit::Verdict::kDeny);
  auto tunnel = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.execution_id == "exec-shadow" && e.kind == audit::ConnectionKind::kConnect;
  });
  ASSERT_TRUE(tunnel);
  EXPECT_EQ(tunnel->decision, audit::Decision::kAllow);
  EXPECT_EQ(tunnel->stamp.shadow_decision, audit::Verdict::kDeny);
  // The fixture's own listener has no shadow: its rows stay unstamped.
  EXPECT_EQ(roundTrip(getRequest(up, "/plain", "Connection: close\r\n")).status, 200);
  auto plain = request("exec-1", "GET", "/plain");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->stamp.shadow_decision);
}

// A candidate that names every host the traffic goes to, but not at the addresses it goes to:
// upstream.test outside its cidrs, other.test without allow_private, metadata.test (the
// fixture's 169.254.169.254) without allow_private.
std::string addressCandidate() {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: addresses\negress:\n  rules:\n"
         "    - id: outside-cidrs\n      action: allow\n      hosts: [upstream.test]\n"
         "      ports: [\"1-65535\"]\n      allow_private: true\n      cidrs: [\"10.0.0.0/8\"]\n"
         "    - id: no-private\n      action: allow\n      hosts: [other.test, metadata.test]\n"
         "      ports: [\"1-65535\"]\n";
}

// The shadow is decided with the checks the live decision makes at the address (rule cidrs,
// the SSRF guard, also at the address a live refusal was decided at), and every connection
// kind with a live decision is stamped, plain-HTTP origin connections included. The same
// traffic under a candidate equal to the live policy agrees row for row.
TEST_F(ShadowLearnTest, TheShadowDecidesAtTheAddressAndStampsEveryConnectionKind) {
  auto traffic = [&](const std::string& exec, std::shared_ptr<const policy::Matcher> shadow) {
    ListenerIdentity id{exec, matcher_};
    id.shadow = std::move(shadow);
    const std::uint16_t port = listen(id);
    Client c(port);
    EXPECT_TRUE(c.send(getRequest(upstream(), "/fresh", "Connection: close\r\n")));
    EXPECT_EQ(c.readResponse().status, 200);
    Client m(port);
    EXPECT_TRUE(m.send(getRequest("metadata.test:80", "/latest", "Connection: close\r\n")));
    EXPECT_EQ(m.readResponse().status, 403);  // the live SSRF guard
    Client t(port);
    EXPECT_TRUE(t.send(connectRequest(echo())));
    EXPECT_EQ(t.readResponse(true).status, 200);
    EXPECT_TRUE(t.send("ping"));
    EXPECT_EQ(t.readN(4), "ping");
  };
  auto connection = [&](const std::string& exec, audit::ConnectionKind kind,
                        const std::string& host) {
    return sink_->waitConnection([&](const audit::ConnectionEvent& e) {
      return e.execution_id == exec && e.kind == kind && e.host == host;
    });
  };
  traffic("exec-addr", compileWorkflow(addressCandidate()));
  auto fresh = request("exec-addr", "GET", "/fresh");
  auto origin = connection("exec-addr", audit::ConnectionKind::kHttp, "upstream.test");
  auto guarded = request("exec-addr", "GET", "/latest");
  auto guarded_conn = connection("exec-addr", audit::ConnectionKind::kHttp, "metadata.test");
  auto tunnel = connection("exec-addr", audit::ConnectionKind::kConnect, "other.test");
  ASSERT_TRUE(fresh && origin && guarded && guarded_conn && tunnel);
  EXPECT_EQ(fresh->decision, audit::Decision::kAllow);
  EXPECT_EQ(fresh->stamp.shadow_decision, audit::Verdict::kDeny);  // 127.0.0.1 not in 10/8
  EXPECT_EQ(fresh->stamp.shadow_rule, "outside-cidrs");
  EXPECT_EQ(origin->decision, audit::Decision::kAllow);
  EXPECT_EQ(origin->stamp.shadow_decision, audit::Verdict::kDeny);
  EXPECT_EQ(origin->stamp.shadow_rule, "outside-cidrs");
  EXPECT_EQ(guarded->decision, audit::Decision::kDeny);
  EXPECT_EQ(guarded->stamp.shadow_decision, audit::Verdict::kDeny);  // at 169.254.169.254
  EXPECT_EQ(guarded->stamp.shadow_rule, "no-private");
  EXPECT_EQ(guarded_conn->stamp.shadow_decision, audit::Verdict::kDeny);
  EXPECT_EQ(tunnel->decision, audit::Decision::kAllow);
  EXPECT_EQ(tunnel->stamp.shadow_decision, audit::Verdict::kDeny);  // loopback, no allow_private
  EXPECT_EQ(tunnel->stamp.shadow_rule, "no-private");

  traffic("exec-same", matcher_);
  fresh = request("exec-same", "GET", "/fresh");
  origin = connection("exec-same", audit::ConnectionKind::kHttp, "upstream.test");
  guarded = request("exec-same", "GET", "/latest");
  tunnel = connection("exec-same", audit::ConnectionKind::kConnect, "other.test");
  ASSERT_TRUE(fresh && origin && guarded && tunnel);
  EXPECT_EQ(fresh->stamp.shadow_decision, audit::Verdict::kAllow);
  EXPECT_EQ(fresh->stamp.shadow_rule, fresh->rule_id);
  EXPECT_EQ(origin->stamp.shadow_decision, audit::Verdict::kAllow);
  EXPECT_EQ(guarded->stamp.shadow_decision, audit::Verdict::kDeny);
  EXPECT_EQ(tunnel->stamp.shadow_decision, audit::Verdict::kAllow);
  EXPECT_EQ(tunnel->stamp.shadow_rule, tunnel->rule_id);
}

// The shadow decides a request as it travelled: over plain http:// a candidate's rule that
// injects credentials (without allow_plaintext_credentials) refuses it, as the live one would.
TEST_F(ShadowLearnTest, TheShadowDecidesARequestAsItTravelledOutsideTls) {
  ListenerIdentity id{"exec-plain", matcher_};
  id.shadow = compileWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: injects\negress:\n  rules:\n"
      "    - id: injects\n      action: allow\n      hosts: [upstream.test]\n"
      "      ports: [\"1-65535\"]\n      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n"
      "      inject:\n        headers:\n          Authorization: \"Bearer ${secret:api_token}\"\n");
  ASSERT_TRUE(id.shadow);
  Client c(listen(id));
  ASSERT_TRUE(c.send(getRequest(upstream(), "/plain", "Connection: close\r\n")));
  EXPECT_EQ(c.readResponse().status, 200);  // the live policy injects nothing here
  auto plain = request("exec-plain", "GET", "/plain");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->decision, audit::Decision::kAllow);
  EXPECT_EQ(plain->stamp.shadow_decision, audit::Verdict::kDeny);
  EXPECT_EQ(plain->stamp.shadow_rule, "injects");
}

TEST_F(ShadowLearnTest, LearnModeLetsThroughWhatNoRuleRefusesAsWouldDeny) {
  ListenerIdentity id{"exec-learn", compileWorkflow(learnPolicy())};
  id.learn = true;
  const std::uint16_t port = listen(id);
  const std::string up = upstream();
  auto status = [&](const std::string& method, const std::string& authority,
                    const std::string& path) {
    Client c(port);
    const std::string body = method == "POST" ? "x" : "";
    EXPECT_TRUE(c.send(getRequest(authority, path,
                                  (body.empty() ? std::string() : "Content-Length: 1\r\n") +
                                      "Connection: close\r\n",
                                  method) +
                       body));
    return c.readResponse().status;
  };
  EXPECT_EQ(status("GET", up, "/v1/ok"), 200);             // the rule allows it
  EXPECT_EQ(status("POST", up, "/v1/orders"), 200);        // learned: method not allowed
  EXPECT_EQ(status("GET", up, "/admin/x"), 403);           // the deny rule still denies
  EXPECT_EQ(status("GET", "metadata.test:80", "/"), 403);  // the address guard (169.254/16)
  auto ok = request("exec-learn", "GET", "/v1/ok");
  auto learned = request("exec-learn", "POST", "/v1/orders");
  auto admin = request("exec-learn", "GET", "/admin/x");
  ASSERT_TRUE(ok && learned && admin);
  EXPECT_EQ(ok->decision, audit::Decision::kAllow);
  EXPECT_EQ(learned->decision, audit::Decision::kWouldDeny);
  EXPECT_EQ(learned->reason, "method_not_allowed");
  EXPECT_EQ(learned->rule_id, "items");
  EXPECT_EQ(admin->decision, audit::Decision::kDeny);
  EXPECT_EQ(admin->rule_id, "no-admin");
  // The address guard's refusal is a connections row of its own.
  auto guard = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.execution_id == "exec-learn" && e.host == "metadata.test";
  });
  ASSERT_TRUE(guard);
  EXPECT_EQ(guard->decision, audit::Decision::kDeny);
  EXPECT_EQ(guard->reason, "private_address");
  auto stats = proxy_->stats("exec-learn");
  EXPECT_EQ(stats.would_deny, 1u);
}

// A live update re-decides a learning listener's open tunnels in learn mode, as its admission
// decided them: a raw tunnel let through as would_deny (the one rule names other.test on
// another port, vouching for its loopback address) is not cut by an update that changes
// nothing for it. The tunnel's row is written at closeExecution, after the update's
// re-decision on the same strand, so its reason says whether the update cut it.
TEST_F(ShadowLearnTest, ALiveUpdateJudgesALearningListenersTunnelsInLearnMode) {
  const std::string yaml =
      "apiVersion: sluice/v1\nkind: Workflow\nname: learning\negress:\n  rules:\n"
      "    - id: echo-address\n      action: allow\n      hosts: [other.test]\n"
      "      ports: [\"1\"]\n      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n";
  ListenerIdentity id{"exec-learn", compileWorkflow(yaml)};
  id.learn = true;
  Client c(listen(id));
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  ASSERT_TRUE(c.send("abc"));
  ASSERT_EQ(c.readN(3), "abc");
  auto g = proxy_->replacePolicy("exec-learn", compileWorkflow(yaml));
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_TRUE(c.send("def"));
  EXPECT_EQ(c.readN(3), "def");
  proxy_->closeExecution("exec-learn");
  auto row = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.execution_id == "exec-learn" && e.kind == audit::ConnectionKind::kConnect;
  });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kWouldDeny);
  EXPECT_NE(row->reason, "policy_changed") << row->detail;
}

}  // namespace
}  // namespace sluice::proxy::testing
