// A standalone proxy shared by many clients (ListenerIdentity::per_client_window, `sluice
// proxy`): one hostile client cannot lock the others out by spending the workflow's limits
// (refused requests, allowed requests, idle tunnels), budgets start again each window and on
// reload. And a long-running proxy frees what finished executions left (listener records).
#include <gtest/gtest.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <thread>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

class ClientBudgetTest : public ProxyFixture {
 protected:
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: shared\negress:\n  rules:\n"
           "    - {id: api, action: allow, hosts: [upstream.test, other.test],\n"
           "       ports: [\"1-65535\"], allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
           "  limits: {max_requests: 5, max_connections: 2}\n";
  }
  // A standalone listener: limits per client address over `window`.
  std::uint16_t sharedListener(std::chrono::seconds window = std::chrono::seconds(3600)) {
    ListenerIdentity id{"", matcher_};
    id.per_client_window = window;
    auto port = proxy_->listen("127.0.0.1", 0, id);
    EXPECT_TRUE(port);
    return port ? *port : 0;
  }
  int status(std::uint16_t port, const char* source, const std::string& authority) {
    Client c(port, std::chrono::seconds(5), source);
    EXPECT_TRUE(c.ok()) << source;
    // Connection: close, read to the end: the proxy has let go of this connection's upstream
    // slot before the next request (max_connections is 2 here), even on a loaded machine.
    c.send(getRequest(authority, "/", "Connection: close\r\n"));
    const int code = c.readResponse().status;
    c.waitClosed();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return code;
  }
};

TEST_F(ClientBudgetTest, RefusedRequestsDoNotSpendTheBudget) {
  auto port = sharedListener();
  // 1,000 refused requests from one client, on one kept-alive connection...
  Client flood(port, std::chrono::seconds(5), "127.0.0.2");
  for (int round = 0; round < 10; ++round) {
    std::string batch;
    for (int i = 0; i < 100; ++i) batch += getRequest("denied.test:80", "/");
    ASSERT_TRUE(flood.send(batch));
    for (int i = 0; i < 100; ++i) ASSERT_EQ(flood.readResponse().status, 403) << round << " " << i;
  }
  // ...spend nothing: that client and every other still get their allowed requests.
  EXPECT_EQ(status(port, "127.0.0.2", upstream()), 200);
  EXPECT_EQ(status(port, "127.0.0.3", upstream()), 200);
}

TEST_F(ClientBudgetTest, OneClientSpendingItsBudgetLeavesTheOthersAlone) {
  auto port = sharedListener();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(status(port, "127.0.0.2", upstream()), 200) << i;
  EXPECT_EQ(status(port, "127.0.0.2", upstream()), 429);
  // Another address has its own budget.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(status(port, "127.0.0.3", upstream()), 200) << i;
  EXPECT_EQ(status(port, "127.0.0.3", upstream()), 429);
  EXPECT_EQ(status(port, "127.0.0.4", upstream()), 200);
  // A reload (SIGHUP in `sluice proxy`) starts every budget again.
  proxy_->replaceMatcher("shared", compileWorkflow(policyYaml()));
  EXPECT_EQ(status(port, "127.0.0.2", upstream()), 200);
}

TEST_F(ClientBudgetTest, BudgetsStartAgainEachWindow) {
  auto port = sharedListener(std::chrono::seconds(1));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(status(port, "127.0.0.2", upstream()), 200) << i;
  EXPECT_EQ(status(port, "127.0.0.2", upstream()), 429);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(status(port, "127.0.0.2", upstream()), 200);
}

TEST_F(ClientBudgetTest, IdleTunnelsOfOneClientDoNotStarveAnother) {
  auto port = sharedListener();
  // The hostile client holds max_connections (2) tunnels open and idle...
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<Client>(port, std::chrono::seconds(5), "127.0.0.2"));
    held.back()->send(connectRequest(echo()));
    EXPECT_EQ(held.back()->readResponse(true).status, 200);
  }
  // ...its third is refused...
  Client third(port, std::chrono::seconds(5), "127.0.0.2");
  third.send(connectRequest(echo()));
  EXPECT_EQ(third.readResponse(true).status, 429);
  // ...and another client still gets its tunnels.
  for (int i = 0; i < 2; ++i) {
    Client other(port, std::chrono::seconds(5), "127.0.0.3");
    other.send(connectRequest(echo()));
    EXPECT_EQ(other.readResponse(true).status, 200) << i;
  }
}

// An execution's listener (not shared) keeps lifetime totals, refused requests included:
// `sluice run` is one program, and its limits are per execution.
TEST_F(ClientBudgetTest, AnExecutionsLimitsStayTotals) {
  for (int i = 0; i < 5; ++i) {
    Client c(port_);
    c.send(getRequest("denied.test:80", "/"));
    EXPECT_EQ(c.readResponse().status, 403);
  }
  Client c(port_, std::chrono::seconds(5), "127.0.0.9");
  c.send(getRequest(upstream(), "/"));
  EXPECT_EQ(c.readResponse().status, 429);
}

std::size_t rssBytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// Finished executions leave nothing behind: 10,000 of them (a listener, a connection and a
// request each, then closeExecution) bring RSS back to within 1 MiB of where it was.
TEST_F(ClientBudgetTest, TenThousandExecutionsLeaveNoListenerRecords) {
  // Its own proxy without an audit sink (the fixture's fake sink keeps every row in memory) and
  // with info logs off (20,000 lines would be most of the time).
  auto made = Proxy::create(options(), nullptr, resolver_);
  ASSERT_TRUE(made);
  auto& px = **made;
  px.start();
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);
  struct Restore {
    spdlog::level::level_enum level;
    ~Restore() { spdlog::set_level(level); }
  } restore{level};
  auto one = [&](int n) {
    const std::string id = "exec-" + std::to_string(n);
    auto port = px.listen("127.0.0.1", 0, {id, matcher_});
    ASSERT_TRUE(port);
    {
      Client c(*port);
      c.send(getRequest("denied.test:80", "/"));
      ASSERT_EQ(c.readResponse().status, 403);
    }
    px.closeExecution(id);
    // The final counters stay readable after the records are freed.
    ASSERT_EQ(px.stats(id).denied, 1u);
  };
  for (int i = 0; i < 2000; ++i) one(i);  // warm up allocator pools and caches
  ::malloc_trim(0);
  const std::size_t base = rssBytes();
  for (int i = 2000; i < 12000; ++i) {
    one(i);
    if (HasFatalFailure()) return;
  }
  ::malloc_trim(0);
  const std::size_t after = rssBytes();
  EXPECT_LT(after, base + (1u << 20)) << "RSS grew from " << base << " to " << after;
}

}  // namespace
}  // namespace sluice::proxy::testing
