// The approvals fixture: a proxy whose listener (execution exec-1) holds `action: ask` matches
// at an approval desk the test answers, with helpers to wait for raised approvals, hold a
// CONNECT and read the approvals rows (approval_test.cpp, live_approval_test.cpp).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {

/// Rule ask-tunnel asks for other.test and *.ask.test; local-upstream allows upstream.test and
/// other.test (both on loopback, allow_private with cidrs 127.0.0.0/8).
inline std::string askPolicy(const std::string& timeout = "5s") {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: asking\negress:\n  rules:\n"
         "    - id: ask-tunnel\n"
         "      action: ask\n"
         "      ask: {timeout: " +
         timeout +
         "}\n"
         "      hosts: [other.test, \"*.ask.test\"]\n"
         "      ports: [\"1-65535\"]\n"
         "      allow_private: true\n"
         "      cidrs: [\"127.0.0.0/8\"]\n"
         "    - id: local-upstream\n"
         "      action: allow\n"
         "      hosts: [upstream.test, other.test]\n"
         "      ports: [\"1-65535\"]\n"
         "      allow_private: true\n"
         "      cidrs: [\"127.0.0.0/8\"]\n"
         "  limits: {max_connections: 1000}\n";
}

class ApprovalTest : public ProxyFixture {
 protected:
  std::string policyYaml() override { return askPolicy(timeout_); }
  bool wantApprovals() const override { return true; }
  void approve(const Approval& a) override {
    std::lock_guard lock(mu_);
    raised_.push_back(a);
    cv_.notify_all();
  }

  // Waits for the next approval the desk raised (as approvers were told of it).
  std::optional<Approval> nextRaised(std::chrono::milliseconds wait = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return !raised_.empty(); })) return std::nullopt;
    Approval a = raised_.front();
    raised_.pop_front();
    return a;
  }

  std::vector<audit::ApprovalEvent> approvalRows(std::size_t n) {
    for (int i = 0; i < 500 && sink_->approvals().size() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return sink_->approvals();
  }

  // A client that sent a CONNECT to `authority` on `port` and whose approval was raised.
  struct Held {
    std::unique_ptr<Client> client;
    Approval approval;
  };
  Held hold(std::uint16_t port, const std::string& authority,
            std::chrono::milliseconds read_timeout = std::chrono::seconds(5)) {
    Held h{std::make_unique<Client>(port, read_timeout), {}};
    EXPECT_TRUE(h.client->ok());
    h.client->send(connectRequest(authority));
    auto a = nextRaised();
    EXPECT_TRUE(a) << "no approval raised for " << authority;
    if (a) h.approval = *a;
    return h;
  }

  std::vector<std::string> pendingIds() {
    std::vector<std::string> ids;
    for (const auto& a : approvals_->pending()) ids.push_back(a.id);
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  static std::optional<audit::ApprovalEvent> rowOf(const std::vector<audit::ApprovalEvent>& rows,
                                                   const std::string& id) {
    for (const auto& r : rows)
      if (r.id == id) return r;
    return std::nullopt;
  }
  // The row of approval `id`, settled by the `scope: execution` answer to `answered` (by
  // "tester") with `decision` and `reason`.
  static void expectSettledRow(const std::vector<audit::ApprovalEvent>& rows, const std::string& id,
                               const std::string& answered, audit::Decision decision,
                               const std::string& reason) {
    auto row = rowOf(rows, id);
    ASSERT_TRUE(row) << "no row for " << id;
    EXPECT_EQ(row->decision, decision);
    EXPECT_EQ(row->reason, reason);
    EXPECT_EQ(row->scope, audit::ApprovalScope::kExecution);
    EXPECT_EQ(row->decided_by, "scope:execution of " + answered + " (tester)");
  }

  std::string timeout_ = "5s";
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Approval> raised_;
};

}  // namespace sluice::proxy::testing
