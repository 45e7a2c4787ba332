// The Proxy object's control plane: adopted listeners (the runner's path), per-execution
// attribution and stats, policy replacement, closing an execution, stop().
#include "sluice/proxy/proxy.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

using ProxyTest = ProxyFixture;

int listeningSocket(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port = ntohs(sa.sin_port);
  return fd;
}

TEST_F(ProxyTest, AdoptedListenerIsAttributedToItsExecution) {
  std::uint16_t port = 0;
  int fd = listeningSocket(port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(proxy_->adoptListener(fd, {"exec-2", matcher_}));
  Client c(port);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/adopted")));
  EXPECT_EQ(c.readResponse().status, 200);
  auto req = sink_->waitRequest([](const auto& e) { return e.path == "/adopted"; });
  ASSERT_TRUE(req);
  EXPECT_EQ(req->execution_id, "exec-2");
  EXPECT_EQ(proxy_->stats("exec-2").requests, 1u);
  EXPECT_EQ(proxy_->stats("exec-1").requests, 0u);
}

TEST_F(ProxyTest, AdoptRefusesWhatIsNotAListeningSocket) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  auto r = proxy_->adoptListener(fd, {"exec-3", matcher_});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not listening"), std::string::npos);
  int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
  EXPECT_FALSE(proxy_->adoptListener(udp, {"exec-3", matcher_}));
  EXPECT_FALSE(proxy_->adoptListener(-1, {"exec-3", matcher_}));
}

TEST_F(ProxyTest, ListenErrorsAreValues) {
  auto bad = proxy_->listen("not-an-ip", 0, {"", matcher_});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("not-an-ip"), std::string::npos);
  auto taken = proxy_->listen("127.0.0.1", port_, {"", matcher_});
  EXPECT_FALSE(taken);
  EXPECT_FALSE(proxy_->listen("127.0.0.1", 0, {"", nullptr}));
}

TEST_F(ProxyTest, WildcardListenerIsNotDialledEither) {
  auto port = proxy_->listen("0.0.0.0", 0, {"exec-1", matcher_});
  ASSERT_TRUE(port) << port.error().message;
  auto r = roundTrip(connectRequest("upstream.test:" + std::to_string(*port)));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "proxy_loop");
  // Another port on the same host is not the proxy.
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  EXPECT_EQ(c.readResponse(true).status, 200);
}

TEST_F(ProxyTest, ReplaceMatcherAppliesToNewRequests) {
  EXPECT_EQ(roundTrip(getRequest(upstream(), "/before")).status, 200);
  auto deny_all = compileWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: test\negress:\n  rules:\n"
      "    - {id: only-other, action: allow, hosts: [elsewhere.test]}\n");
  ASSERT_TRUE(deny_all);
  proxy_->replaceMatcher("test", deny_all);
  auto r = roundTrip(getRequest(upstream(), "/after"));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "no_matching_rule");
  // Another workflow's name replaces nothing.
  proxy_->replaceMatcher("unrelated", matcher_);
  EXPECT_EQ(roundTrip(getRequest(upstream(), "/still")).status, 403);
  EXPECT_GE(sink_->policyCount(), 2u);
  // Each swap is a generation: rows say which decided them, the stats list them in order.
  sink_->waitRequestCount(3);  // each written just after its client read the answer
  auto rows = sink_->requests();
  ASSERT_EQ(rows.size(), 3u);
  // The rows come in the order their exchanges recorded them, not the order of the requests
  // (under a loaded `ctest -j`, /after's once came before /before's): look each up by its path.
  std::map<std::string, std::uint64_t> generation_of;
  for (const auto& row : rows) generation_of[row.path] = row.stamp.policy_generation;
  EXPECT_EQ(generation_of["/before"], 1u);
  EXPECT_EQ(generation_of["/after"], 2u);
  EXPECT_EQ(generation_of["/still"], 2u);
  const auto gens = proxy_->stats(execution_id_).policy_generations;
  ASSERT_EQ(gens.size(), 2u);
  EXPECT_EQ(gens[0].generation, 1u);
  EXPECT_EQ(gens[1].generation, 2u);
  EXPECT_EQ(gens[1].policy_sha256, deny_all->workflow().sha256);
}

TEST_F(ProxyTest, ReplacePolicyIsOneGenerationOfOneExecution) {
  auto narrower = compileWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: test\negress:\n  rules:\n"
      "    - {id: only-other, action: allow, hosts: [elsewhere.test]}\n");
  ASSERT_TRUE(narrower);
  EXPECT_FALSE(proxy_->replacePolicy("no-such-exec", narrower));
  auto g = proxy_->replacePolicy(execution_id_, narrower);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(*g, 2u);
  auto r = roundTrip(getRequest(upstream(), "/after"));
  EXPECT_EQ(r.status, 403);
  auto again = proxy_->replacePolicy(execution_id_, matcher_);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 3u);
  EXPECT_EQ(roundTrip(getRequest(upstream(), "/back")).status, 200);
  // A request's row is written when its exchange ends, which may be after the client read it.
  ASSERT_EQ(sink_->waitRequestCount(2), 2u);
  auto rows = sink_->requests();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].stamp.policy_generation, 2u);
  EXPECT_EQ(rows[1].stamp.policy_generation, 3u);
  // The origin connection of the last request is generation 3's (its row is written at close).
  EXPECT_TRUE(sink_->waitConnection([](const audit::ConnectionEvent& c) {
    return c.decision == audit::Decision::kAllow && c.stamp.policy_generation == 3;
  }));
}

TEST_F(ProxyTest, CloseExecutionEndsItsTunnelsAndListener) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  ASSERT_TRUE(c.send("abc"));
  EXPECT_EQ(c.readN(3), "abc");
  proxy_->closeExecution("exec-1");
  // On return the tunnel's row is written and the stats are final.
  auto rows = sink_->connections();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].reason, "closed");
  EXPECT_EQ(proxy_->stats("exec-1").bytes_out, 3u);
  EXPECT_TRUE(c.waitClosed());
  Client late(port_);
  // Either the connect fails or the connection is closed unanswered.
  if (late.ok()) {
    late.send(getRequest(upstream(), "/"));
    EXPECT_EQ(late.readResponse().status, 0);
  }
}

TEST_F(ProxyTest, StopDrainsAndIsIdempotent) {
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  ASSERT_EQ(c.readResponse(true).status, 200);
  proxy_->stop();
  EXPECT_TRUE(c.waitClosed());
  proxy_->stop();
  EXPECT_TRUE(sink_->waitConnection(
      [](const auto& e) { return e.kind == audit::ConnectionKind::kConnect; }));
}

class SingleThreadProxyTest : public ProxyFixture {
 protected:
  ProxyOptions options() override {
    auto o = ProxyFixture::options();
    o.threads = 1;  // no strands: the io_context serialises everything
    return o;
  }
};

TEST_F(SingleThreadProxyTest, ForwardsTunnelsAndRequestsConcurrently) {
  Client tunnel(port_);
  ASSERT_TRUE(tunnel.send(connectRequest(echo())));
  ASSERT_EQ(tunnel.readResponse(true).status, 200);
  Client http(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(http.send(getRequest(upstream(), "/s" + std::to_string(i))));
    ASSERT_EQ(http.readResponse().status, 200);
    ASSERT_TRUE(tunnel.send("x" + std::to_string(i)));
    EXPECT_EQ(tunnel.readN(2), "x" + std::to_string(i));
  }
  EXPECT_EQ(roundTrip(getRequest(upstream(), "/admin/x")).status, 403);
}

// A sandbox's proxy listeners are two (127.0.0.1 and [::1]) for one execution: they share its
// budget, so connecting over IPv6 does not buy a second max_connections.
class ExecutionBudgetTest : public ProxyFixture {
 protected:
  std::string policyYaml() override { return standardPolicy("test", "    max_connections: 1\n"); }
};

TEST_F(ExecutionBudgetTest, IPv4AndIPv6ListenersShareOneBudget) {
  auto port6 = proxy_->listen("::1", 0, {execution_id_, matcher_});
  ASSERT_TRUE(port6) << port6.error().message;
  Client held(port_);
  ASSERT_TRUE(held.send(connectRequest(echo())));
  ASSERT_EQ(held.readResponse(true).status, 200);
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(*port6);
  sa.sin6_addr = in6addr_loopback;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << std::strerror(errno);
  const std::string req = connectRequest(echo());
  ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)).rfind("HTTP/1.1 429", 0), 0u)
      << std::string(buf, static_cast<std::size_t>(n));
  // One execution's counters, counted once (a tunnel is counted when its row is written, as
  // it ends: closing the execution ends it).
  proxy_->closeExecution(execution_id_);
  auto st = proxy_->stats(execution_id_);
  EXPECT_EQ(st.allowed, 1u);
  EXPECT_EQ(st.denied, 1u);
}

TEST(ProxyCreate, RejectsTinyHeaderLimit) {
  ProxyOptions o;
  o.max_header_bytes = 10;
  EXPECT_FALSE(Proxy::create(o, nullptr, nullptr));
}

TEST(StaticResolverTest, MapsNamesAndFailsOthers) {
  StaticResolver r;
  r.add("a.test", {*policy::parseIpLiteral("10.0.0.1")});
  auto ok = r.resolve("a.test");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->at(0).str(), "10.0.0.1");
  EXPECT_FALSE(r.resolve("b.test"));
}

}  // namespace
}  // namespace sluice::proxy::testing
