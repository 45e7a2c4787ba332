// A live policy update under load (Proxy::replacePolicy): 50 kept-alive plain-HTTP clients and
// open tunnels, tightened mid-run. Nothing the new policy refuses gets another byte through
// (checked at the upstream), nothing it allows is cut, and the rows carry both generations.
#include <gtest/gtest.h>

#include <algorithm>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

class LivePolicyTest : public ProxyFixture {
 protected:
  // Room for 50 kept-alive origin connections and the tunnels.
  std::string policyYaml() override { return standardPolicy("test", "    max_connections: 100\n"); }
  // The same without other.test: tunnels to it are cut, requests to it refused.
  std::shared_ptr<const policy::Matcher> tightened() {
    auto yaml = policyYaml();
    yaml.replace(yaml.find("[upstream.test, other.test]"), 27, "[upstream.test]");
    return compileWorkflow(yaml);
  }
  int headsFor(const std::string& host) {
    std::lock_guard lock(up_.httpLog().mu);
    const auto& heads = up_.httpLog().request_heads;
    return static_cast<int>(std::count_if(heads.begin(), heads.end(), [&](const std::string& h) {
      return h.find(host) != std::string::npos;
    }));
  }
  std::string other() const { return "other.test:" + std::to_string(up_.httpPort()); }
  // Two raw tunnels to the echo server, each carrying "abc" both ways, and `kept`, a tunnel to
  // upstream.test with one plain-HTTP request answered in it.
  void openTunnels(std::vector<std::unique_ptr<Client>>& echoes, Client& kept) {
    for (int i = 0; i < 2; ++i) {
      echoes.push_back(std::make_unique<Client>(port_));
      ASSERT_TRUE(echoes.back()->send(connectRequest(echo())));
      ASSERT_EQ(echoes.back()->readResponse(true).status, 200);
      ASSERT_TRUE(echoes.back()->send("abc"));
      ASSERT_EQ(echoes.back()->readN(3), "abc");
    }
    ASSERT_TRUE(kept.send(connectRequest(upstream())));
    ASSERT_EQ(kept.readResponse(true).status, 200);
    ASSERT_TRUE(kept.send("GET /in HTTP/1.1\r\nHost: " + upstream() + "\r\n\r\n"));
    ASSERT_EQ(kept.readResponse().status, 200);
  }
  // The echo tunnels are closed, and each row ends `policy_changed` under generation 2 with a
  // detail naming the refusal of other.test (and `also`, when given).
  void expectEchoesCut(std::vector<std::unique_ptr<Client>>& echoes, const std::string& also = "") {
    for (auto& e : echoes) EXPECT_TRUE(e->waitClosed());
    for (std::size_t i = 0; i < echoes.size(); ++i) {
      auto row = sink_->waitConnection(
          [&](const audit::ConnectionEvent& c) { return c.reason == "policy_changed"; });
      ASSERT_TRUE(row);
      EXPECT_EQ(row->stamp.policy_generation, 2u);
      EXPECT_NE(row->detail.find("policy generation 2 refuses other.test"), std::string::npos)
          << row->detail;
      if (!also.empty()) {
        EXPECT_NE(row->detail.find(also), std::string::npos) << row->detail;
      }
    }
  }
};

TEST_F(LivePolicyTest, TighteningCutsWhatItRefusesAndKeepsTheRest) {
  constexpr int kClients = 50;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>(port_));
    const auto& to = i % 2 == 0 ? upstream() : other();
    ASSERT_TRUE(clients.back()->send(getRequest(to, "/before")));
    ASSERT_EQ(clients.back()->readResponse().status, 200) << i;
  }
  // Two raw tunnels to other.test's echo server (to be cut), one plain-HTTP tunnel to
  // upstream.test (kept).
  std::vector<std::unique_ptr<Client>> echoes;
  Client kept(port_);
  ASSERT_NO_FATAL_FAILURE(openTunnels(echoes, kept));
  const std::string in_tunnel = "GET /in HTTP/1.1\r\nHost: " + upstream() + "\r\n\r\n";
  const int other_before = headsFor("other.test");

  auto g = proxy_->replacePolicy(execution_id_, tightened());
  ASSERT_TRUE(g) << g.error().message;
  ASSERT_EQ(*g, 2u);

  // The echo tunnels are cut at the swap, their rows say why and under which generation.
  ASSERT_NO_FATAL_FAILURE(expectEchoesCut(echoes));
  // Every kept-alive client is decided again at its next request, by generation 2.
  for (int i = 0; i < kClients; ++i) {
    const bool allowed = i % 2 == 0;
    ASSERT_TRUE(clients[i]->send(getRequest(allowed ? upstream() : other(), "/after")));
    EXPECT_EQ(clients[i]->readResponse().status, allowed ? 200 : 403) << i;
  }
  EXPECT_EQ(headsFor("other.test"), other_before);  // not one more request reached it
  // The plain-HTTP tunnel to upstream.test goes on.
  ASSERT_TRUE(kept.send(in_tunnel));
  EXPECT_EQ(kept.readResponse().status, 200);

  // A request's row is written when its exchange ends, just after the client read the answer.
  sink_->waitRequestCount(2 * (kClients + 1));
  int gen1 = 0, gen2 = 0;
  for (const auto& r : sink_->requests()) {
    gen1 += r.stamp.policy_generation == 1;
    gen2 += r.stamp.policy_generation == 2;
  }
  EXPECT_EQ(gen1, kClients + 1);
  EXPECT_EQ(gen2, kClients + 1);
  const auto cut = sink_->connections();
  EXPECT_EQ(std::count_if(cut.begin(), cut.end(),
                          [](const auto& c) { return c.reason == "policy_changed"; }),
            2);
}

// Tunnels are judged again with the address they connected to, as the admission judged it:
// other.test stays allowed by host and port, but no longer at a private address (the SSRF
// guard), so its open tunnels to 127.0.0.1 are cut; upstream.test keeps allow_private and its
// tunnel goes on.
TEST_F(LivePolicyTest, TunnelsAreCutByTheAddressTheyConnectedTo) {
  std::vector<std::unique_ptr<Client>> echoes;
  Client kept(port_);
  ASSERT_NO_FATAL_FAILURE(openTunnels(echoes, kept));
  const std::string in_tunnel = "GET /in HTTP/1.1\r\nHost: " + upstream() + "\r\n\r\n";

  const std::string both = "[upstream.test, other.test]\n      ports: [\"1-65535\"]\n";
  auto yaml = policyYaml();
  yaml.replace(yaml.find(both), both.size(),
               "[upstream.test]\n      ports: [\"1-65535\"]\n"
               "      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n"
               "    - id: other-public\n      action: allow\n      hosts: [other.test]\n"
               "      ports: [\"1-65535\"]\n    - id: upstream-rest\n      action: allow\n"
               "      hosts: [upstream.test]\n      ports: [\"1-65535\"]\n");
  auto g = proxy_->replacePolicy(execution_id_, compileWorkflow(yaml));
  ASSERT_TRUE(g) << g.error().message;

  ASSERT_NO_FATAL_FAILURE(expectEchoesCut(echoes, "at 127.0.0.1 (private_address"));
  ASSERT_TRUE(kept.send(in_tunnel));
  EXPECT_EQ(kept.readResponse().status, 200);
}

}  // namespace
}  // namespace sluice::proxy::testing
