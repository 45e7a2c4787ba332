// CONNECT tunnels: relay both ways, eager client bytes, half-close, upstream reset, idle
// timeout, inspection refusal, workflow limits, 1,000 concurrent tunnels, audit rows, a
// receiver that reads late (bytes still in the splice pipe when an EOF arrives).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <future>
#include <nlohmann/json.hpp>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

using TunnelTest = ProxyFixture;

TEST_F(TunnelTest, RelaysBothWaysAndAuditsOnClose) {
  {
    Client c(port_);
    ASSERT_TRUE(c.send(connectRequest(echo())));
    auto r = c.readResponse(true);
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(c.send("ping"));
    EXPECT_EQ(c.readN(4), "ping");
  }
  auto row = sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kAllow);
  EXPECT_EQ(row->rule_id, "local-upstream");
  EXPECT_EQ(row->reason, "allowed");
  EXPECT_EQ(row->tls, audit::TlsHandling::kPassthrough);
  EXPECT_EQ(row->host, "other.test");
  EXPECT_EQ(row->port, up_.echoPort());
  EXPECT_EQ(row->resolved_ip, "127.0.0.1");
  EXPECT_EQ(row->execution_id, "exec-1");
  EXPECT_EQ(row->bytes_up, 4u);
  EXPECT_GE(row->bytes_down, 4u);
  auto stats = proxy_->stats("exec-1");
  EXPECT_EQ(stats.allowed, 1u);
  EXPECT_EQ(stats.bytes_out, 4u);
  EXPECT_EQ(stats.connections, 1u);
}

TEST_F(TunnelTest, BulkTransferArrivesIntactBothWays) {
  // Large enough to switch both directions from copying to splice(2).
  constexpr std::size_t kBytes = 4 << 20;
  std::string payload(kBytes, '\0');
  for (std::size_t i = 0; i < kBytes; ++i) payload[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  Client c(port_, std::chrono::seconds(20));
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  std::thread writer([&] {
    c.send(payload);
    c.shutdownWrite();
  });
  std::string got = c.readAll();
  writer.join();
  ASSERT_EQ(got.size(), kBytes + 3);
  EXPECT_TRUE(got.compare(0, kBytes, payload) == 0);
  EXPECT_EQ(got.substr(kBytes), "BYE");
  auto row = sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->bytes_up, kBytes);
  EXPECT_EQ(row->bytes_down, kBytes + 3);
}

TEST_F(TunnelTest, AReceiverThatReadsLateGetsEveryByteBeforeTheFin) {
  // The client reads nothing until it has sent everything and half-closed: the echo's replies
  // back up into the tunnel, so the pipes hold bytes when each EOF arrives and must drain
  // before the FIN is passed on.
  constexpr std::size_t kBytes = 8 << 20;
  std::string payload(kBytes, '\0');
  for (std::size_t i = 0; i < kBytes; ++i) payload[i] = static_cast<char>((i * 7 + i / 251) & 0xff);
  Client c(port_, std::chrono::seconds(30));
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  std::promise<void> sent;
  std::thread writer([&] {
    c.send(payload);
    c.shutdownWrite();
    sent.set_value();
  });
  // Reading starts when the writer is done or blocked by the backed-up tunnel.
  sent.get_future().wait_for(std::chrono::milliseconds(300));
  std::string got = c.readAll();
  writer.join();
  ASSERT_EQ(got.size(), kBytes + 3);
  EXPECT_TRUE(got.compare(0, kBytes, payload) == 0);
  EXPECT_EQ(got.substr(kBytes), "BYE");
  auto row = sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->bytes_up, kBytes);
  EXPECT_EQ(row->bytes_down, kBytes + 3);
}

TEST_F(TunnelTest, BytesSentWithTheConnectAreForwarded) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo()) + "early"));
  ASSERT_EQ(c.readResponse(true).status, 200);
  EXPECT_EQ(c.readN(5), "early");
}

TEST_F(TunnelTest, HalfCloseKeepsTheOtherDirection) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  ASSERT_TRUE(c.send("hello"));
  c.shutdownWrite();
  // The echo server sees EOF only if the FIN was passed on, then answers and closes.
  EXPECT_EQ(c.readAll(), "helloBYE");
  auto row = sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->bytes_down, 8u);
}

TEST_F(TunnelTest, UpstreamResetEndsTheTunnelAndIsAudited) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest("other.test:" + std::to_string(up_.resetPort()))));
  ASSERT_EQ(c.readResponse(true).status, 200);
  EXPECT_EQ(c.readN(7), "partial");
  EXPECT_TRUE(c.waitClosed());
  auto row = sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kAllow);
  EXPECT_EQ(row->reason, "upstream_error");
}

TEST_F(TunnelTest, InspectRulesAreRefusedUntilInspectionExists) {
  auto r = roundTrip(connectRequest("inspect.test:443"));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "inspection_required");
  EXPECT_EQ(nlohmann::json::parse(r.body)["rule"], "inspected");
  auto row = sink_->waitConnection([](const auto& e) { return e.host == "inspect.test"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
}

TEST_F(TunnelTest, PortOutsideTheRuleIsRefused) {
  auto r = roundTrip(connectRequest("inspect.test:8443"));
  EXPECT_EQ(r.status, 403);
  EXPECT_FALSE(r.header("x-sluice-reason").empty());
  EXPECT_NE(nlohmann::json::parse(r.body)["detail"].get<std::string>().find("8443"),
            std::string::npos)
      << r.body;
}

class ManyTunnelsTest : public ProxyFixture {
 protected:
  std::string policyYaml() override {
    return standardPolicy("many", "    max_connections: 2000\n");
  }
};

TEST_F(ManyTunnelsTest, ThousandConcurrentTunnels) {
  constexpr int kTunnels = 1000;
  // Client, proxy (two per tunnel) and echo server share this process: ~4,000 descriptors.
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 4500) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 8192);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < 4500) GTEST_SKIP() << "descriptor limit " << rl.rlim_cur << " < 4500";
  std::vector<std::unique_ptr<Client>> clients;
  clients.reserve(kTunnels);
  for (int i = 0; i < kTunnels; ++i) {
    clients.push_back(std::make_unique<Client>(port_, std::chrono::seconds(10)));
    ASSERT_TRUE(clients.back()->ok()) << i;
    ASSERT_TRUE(clients.back()->send(connectRequest(echo())));
  }
  for (int i = 0; i < kTunnels; ++i) ASSERT_EQ(clients[i]->readResponse(true).status, 200) << i;
  for (int i = 0; i < kTunnels; ++i) ASSERT_TRUE(clients[i]->send("t" + std::to_string(i) + ";"));
  for (int i = 0; i < kTunnels; ++i) {
    std::string want = "t" + std::to_string(i) + ";";
    ASSERT_EQ(clients[i]->readN(want.size()), want) << i;
  }
  EXPECT_EQ(up_.echoLog().accepted.load(), kTunnels);
  clients.clear();
  // Every tunnel writes its row once both sides are closed.
  for (int i = 0; i < 100 && sink_->connections().size() < static_cast<std::size_t>(kTunnels); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(sink_->connections().size(), static_cast<std::size_t>(kTunnels));
}

class IdleTunnelTest : public ProxyFixture {
 protected:
  ProxyOptions options() override {
    auto o = ProxyFixture::options();
    o.idle_timeout = std::chrono::milliseconds(300);
    return o;
  }
};

TEST_F(IdleTunnelTest, IdleTunnelIsClosed) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  EXPECT_TRUE(c.waitClosed());
  auto row = sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->reason, "idle_timeout");
}

class LimitTest : public ProxyFixture {
 protected:
  std::string policyYaml() override {
    return standardPolicy("limited",
                          "    max_connections: 2\n    max_requests: 3\n"
                          "    max_bytes_in: 100KiB\n    max_bytes_out: 1MiB\n");
  }
};

TEST_F(LimitTest, MaxConnectionsRefusesTheNextTunnelWith429) {
  Client a(port_), b(port_), c(port_);
  ASSERT_TRUE(a.send(connectRequest(echo())));
  ASSERT_EQ(a.readResponse(true).status, 200);
  ASSERT_TRUE(b.send(connectRequest(echo())));
  ASSERT_EQ(b.readResponse(true).status, 200);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.header("x-sluice-reason"), "limit_exceeded");
  EXPECT_NE(r.body.find("max_connections"), std::string::npos);
  auto row = sink_->waitConnection([](const auto& e) { return e.reason == "limit_exceeded"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
  // Closing one frees a slot.
  a.shutdownWrite();
  a.readAll();
  bool ok = false;
  for (int i = 0; i < 50 && !ok; ++i) {
    Client d(port_);
    d.send(connectRequest(echo()));
    ok = d.readResponse(true).status == 200;
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ok);
}

TEST_F(LimitTest, MaxRequestsRefusesWith429) {
  Client c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send(getRequest(upstream(), "/r")));
    ASSERT_EQ(c.readResponse().status, 200) << i;
  }
  ASSERT_TRUE(c.send(getRequest(upstream(), "/r")));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(r.body.find("max_requests"), std::string::npos);
  EXPECT_TRUE(sink_->waitRequest([](const auto& e) { return e.status == 429; }));
}

TEST_F(LimitTest, MaxBytesInEndsTheTunnelAndThenRefuses) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  // Echo 150 KiB back: the download budget (100 KiB) runs out on the way.
  std::string chunk(50 * 1024, 'z');
  for (int i = 0; i < 3; ++i)
    if (!c.send(chunk)) break;
  EXPECT_TRUE(c.waitClosed());
  auto row = sink_->waitConnection([](const auto& e) { return e.reason == "limit_exceeded"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kAllow);
  EXPECT_NE(row->detail.find("max_bytes_in"), std::string::npos);
  auto r = roundTrip(connectRequest(echo()));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(roundTrip(getRequest(upstream(), "/")).status, 429);
}

}  // namespace
}  // namespace sluice::proxy::testing

namespace sluice::proxy::testing {
namespace {

// upstream.test is covered by deny rules with methods/paths: a tunnel to it must carry HTTP
// (judged request by request) or TLS; raw bytes there are refused, not relayed unseen.
TEST_F(TunnelTest, RawBytesWhereRequestRulesApplyAreRefused) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest("upstream.test:" + std::to_string(up_.echoPort()))));
  ASSERT_EQ(c.readResponse(true).status, 200);
  ASSERT_TRUE(c.send(std::string("\x01\x02raw protocol bytes", 20)));
  EXPECT_TRUE(c.waitClosed());
  auto row = sink_->waitConnection([](const auto& e) { return e.reason == "not_http"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
  // Dialled, but nothing relayed. The echo server counts the connection when its own accept
  // runs, on its thread, which may come after the proxy's row: wait for it.
  for (int i = 0; i < 200 && up_.echoLog().accepted.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(up_.echoLog().accepted.load(), 1);
}

}  // namespace
}  // namespace sluice::proxy::testing
