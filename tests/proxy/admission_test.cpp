// The one admission (proxy/src/admission.hpp): for every pair of its checks that can both fail,
// a tunnel or request that fails both gets the refusal of the earlier check (status, reason,
// audit row), whatever path it took: a CONNECT, a fresh plain-HTTP connection, a kept-alive
// connection reused, a pipelined request. The order is
//   audit health -> decide -> ask -> budget -> connection slot -> vet -> dial.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

enum class Path { kConnect, kFresh, kReused, kPipelined };
enum class Check { kAudit, kDecide, kAsk, kBudget, kSlot, kVet, kDial };

const char* name(Path p) {
  switch (p) {
    case Path::kConnect:
      return "Connect";
    case Path::kFresh:
      return "Fresh";
    case Path::kReused:
      return "Reused";
    case Path::kPipelined:
      return "Pipelined";
  }
  return "?";
}

const char* name(Check c) {
  switch (c) {
    case Check::kAudit:
      return "Audit";
    case Check::kDecide:
      return "Decide";
    case Check::kAsk:
      return "Ask";
    case Check::kBudget:
      return "Budget";
    case Check::kSlot:
      return "Slot";
    case Check::kVet:
      return "Vet";
    case Check::kDial:
      return "Dial";
  }
  return "?";
}

struct Case {
  Path path;
  Check first;   // fails, and its refusal wins
  Check second;  // fails too, later in the order
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(name(info.param.path)) + "_" + name(info.param.first) + "Before" +
         name(info.param.second);
}

bool tunnel(Path p) { return p == Path::kConnect; }
// Only a tunnel or a request that needs a new upstream connection takes a slot, vets addresses
// and dials; one that reuses an open connection was decided with its vetted address.
bool dials(Path p) { return p == Path::kConnect || p == Path::kFresh; }
bool applies(Path p, Check c) {
  return dials(p) || (c != Check::kSlot && c != Check::kVet && c != Check::kDial);
}

// Every applicable pair (first, second) in the admission's order, on every path. Decide and
// ask are one decision (a denied one never asks): not a pair.
std::vector<Case> allCases() {
  const Check order[] = {Check::kAudit, Check::kDecide, Check::kAsk, Check::kBudget,
                         Check::kSlot,  Check::kVet,    Check::kDial};
  std::vector<Case> out;
  for (Path p : {Path::kConnect, Path::kFresh, Path::kReused, Path::kPipelined})
    for (std::size_t i = 0; i < std::size(order); ++i)
      for (std::size_t j = i + 1; j < std::size(order); ++j) {
        if (order[i] == Check::kDecide && order[j] == Check::kAsk) continue;
        if (applies(p, order[i]) && applies(p, order[j])) out.push_back({p, order[i], order[j]});
      }
  return out;
}

// A port nothing listens on (bound once, then closed): dialling it is refused.
std::uint16_t closedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class AdmissionOrderTest : public ProxyFixture, public ::testing::WithParamInterface<Case> {
 protected:
  bool fails(Check c) const { return GetParam().first == c || GetParam().second == c; }

  // Tunnels spend the byte budget (they count no requests), requests max_requests. A spent
  // budget or a full slot is primed by an earlier tunnel or request (primeHolder).
  std::string policyYaml() override {
    std::string limits;
    if (fails(Check::kBudget))
      limits += tunnel(GetParam().path) ? "max_bytes_out: 16, " : "max_requests: 1, ";
    if (fails(Check::kSlot)) limits += "max_connections: 1, ";
    if (!limits.empty()) limits = "  limits: {" + limits.substr(0, limits.size() - 2) + "}\n";
    return "apiVersion: sluice/v1\nkind: Workflow\nname: order\negress:\n  rules:\n"
           "    - {id: local, action: allow, hosts: [upstream.test, other.test], ports: "
           "[\"1-65535\"],\n       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
           "    - {id: public, action: allow, hosts: [metadata.test], ports: [\"1-65535\"]}\n"
           "    - {id: no-admin, action: deny, hosts: [upstream.test, metadata.test],\n"
           "       ports: [\"1-65535\"], paths: [\"/admin/*\"]}\n"
           "    - {id: blocked, action: deny, hosts: [blocked.test], ports: [\"1-65535\"]}\n"
           "    - {id: gate, action: ask, hosts: [upstream.test, metadata.test], ports: "
           "[\"1-65535\"],\n       paths: [\"/ask/*\"], allow_private: true, cidrs: "
           "[\"127.0.0.0/8\"]}\n"
           "    - {id: gate-tunnel, action: ask, hosts: [ask.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
           "    - {id: gate-public, action: ask, hosts: [askpriv.test], ports: [\"1-65535\"]}\n" +
           limits;
  }

  void SetUp() override {
    ProxyFixture::SetUp();
    const auto metadata = *policy::parseIpLiteral("169.254.169.254");
    resolver_->add("blocked.test", {metadata});
    resolver_->add("askpriv.test", {metadata});
    resolver_->add("ask.test", {*policy::parseIpLiteral("127.0.0.1")});
  }

  // The check's refusal: status, reason and (for the two 429s) a word of the detail.
  struct Expected {
    int status;
    std::string reason;
    std::string detail_word;
  };
  Expected expected(Check c) const {
    switch (c) {
      case Check::kAudit:
        return {503, "audit_unavailable", ""};
      case Check::kDecide:
        return {403, "denied_by_rule", ""};
      case Check::kAsk:
        return {403, "approval_unavailable", ""};
      case Check::kBudget:
        return {429, "limit_exceeded", tunnel(GetParam().path) ? "byte budget" : "max_requests"};
      case Check::kSlot:
        return {429, "limit_exceeded", "max_connections"};
      case Check::kVet:
        return {403, "private_address", ""};
      case Check::kDial:
        return {502, "upstream_error", ""};
    }
    return {};
  }

  // Where the subject goes: each failing check picks the host, port or path that fails it.
  std::string subjectHost() const {
    if (tunnel(GetParam().path)) {
      if (fails(Check::kDecide)) return "blocked.test";
      if (fails(Check::kAsk)) return fails(Check::kVet) ? "askpriv.test" : "ask.test";
      return fails(Check::kVet) ? "metadata.test" : "other.test";
    }
    return fails(Check::kVet) ? "metadata.test" : "upstream.test";
  }
  std::uint16_t subjectPort() {
    if (fails(Check::kDial)) return closed_;
    return tunnel(GetParam().path) ? up_.echoPort() : up_.httpPort();
  }
  std::string subjectPath() const {
    if (fails(Check::kDecide)) return "/admin/x";
    if (fails(Check::kAsk)) return "/ask/x";
    return "/";
  }

  // Another connection of the same execution that spends the budget and holds the one slot:
  // a tunnel that relayed exactly max_bytes_out (16) bytes, or a kept-alive request.
  void primeHolder() {
    holder_ = std::make_unique<Client>(port_);
    ASSERT_TRUE(holder_->ok());
    if (tunnel(GetParam().path)) {
      holder_->send(connectRequest(echo()));
      ASSERT_EQ(holder_->readResponse(true).status, 200);
      if (fails(Check::kBudget)) {
        const std::string sixteen(16, 'x');
        holder_->send(sixteen);
        ASSERT_EQ(holder_->readN(16), sixteen) << "relayed and counted";
      }
      return;
    }
    holder_->send(getRequest(upstream(), "/"));
    ASSERT_EQ(holder_->readResponse().status, 200);
  }

  // Sends the subject on the case's path; the response it got.
  Response sendSubject() {
    const Path p = GetParam().path;
    const std::string authority = subjectHost() + ":" + std::to_string(subjectPort());
    if (p == Path::kConnect || p == Path::kFresh) {
      if (fails(Check::kBudget) || fails(Check::kSlot)) primeHolder();
      if (fails(Check::kAudit)) sink_->setHealthy(false);
      return roundTrip(p == Path::kConnect ? connectRequest(authority)
                                           : getRequest(authority, subjectPath()));
    }
    Client c(port_);
    EXPECT_TRUE(c.ok());
    if (p == Path::kReused) {
      // The first request opens the connection (and spends max_requests: 1).
      c.send(getRequest(upstream(), "/"));
      EXPECT_EQ(c.readResponse().status, 200);
      if (fails(Check::kAudit)) sink_->setHealthy(false);
      c.send(getRequest(authority, subjectPath()));
      return c.readResponse();
    }
    // Pipelined: the subject arrives with the first request. A large first response holds the
    // proxy in its write while an audit failure is set, before the subject is read.
    const std::string first_path = fails(Check::kAudit) ? "/big/33554432" : "/";
    c.send(getRequest(upstream(), first_path) + getRequest(authority, subjectPath()));
    if (fails(Check::kAudit)) {
      EXPECT_TRUE(upstreamSawARequest()) << "the first request was not forwarded";
      sink_->setHealthy(false);
    }
    EXPECT_EQ(c.readResponse().status, 200);
    return c.readResponse();
  }

  // Waits (bounded) until the HTTP upstream has received a request.
  bool upstreamSawARequest() {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard lock(up_.httpLog().mu);
        if (!up_.httpLog().request_heads.empty()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // The audit row of the refused subject: its reason.
  std::string rowReason(const std::string& host, std::uint16_t port, int status) {
    if (tunnel(GetParam().path)) {
      auto row = sink_->waitConnection([&](const audit::ConnectionEvent& e) {
        return e.host == host && e.port == port && e.decision == audit::Decision::kDeny;
      });
      return row ? row->reason : "(no connections row)";
    }
    auto row = sink_->waitRequest([&](const audit::RequestEvent& e) {
      return e.host == host && e.path == subjectPath() && e.status == status;
    });
    if (row) {
      EXPECT_EQ(row->decision, audit::Decision::kDeny);
    }
    return row ? row->reason : "(no requests row)";
  }

  std::uint16_t closed_ = closedPort();
  std::unique_ptr<Client> holder_;
};

TEST_P(AdmissionOrderTest, TheEarlierCheckRefuses) {
  const Expected want = expected(GetParam().first);
  const Response r = sendSubject();
  EXPECT_EQ(r.status, want.status) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), want.reason) << r.body;
  if (!want.detail_word.empty()) {
    EXPECT_NE(r.body.find(want.detail_word), std::string::npos) << r.body;
  }
  EXPECT_EQ(rowReason(subjectHost(), subjectPort(), want.status), want.reason);
  sink_->setHealthy(true);
}

INSTANTIATE_TEST_SUITE_P(EveryPath, AdmissionOrderTest, ::testing::ValuesIn(allCases()), caseName);

// A GET with a body that no rule allows (body_not_allowed) is refused with the decision, before
// an approval is raised for it (an approver is never asked about a request that cannot go).
class BodyBeforeAskTest : public ProxyFixture {
 protected:
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: body\negress:\n  rules:\n"
           "    - {id: gate, action: ask, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n";
  }
  bool wantApprovals() const override { return true; }
  void approve(const Approval& a) override {
    asked_.fetch_add(1);
    approvals_->answer(a.id, true, Scope::kOnce, "tester");
  }
  std::atomic<int> asked_{0};
};

TEST_F(BodyBeforeAskTest, ABodyOnAGetIsRefusedBeforeAnyoneIsAsked) {
  auto r = roundTrip(getRequest(upstream(), "/x", "Content-Length: 5\r\n") + "hello");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "body_not_allowed");
  EXPECT_EQ(asked_.load(), 0) << "no approval raised";
  auto row = sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/x"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->reason, "body_not_allowed");
  EXPECT_TRUE(sink_->approvals().empty());
}

}  // namespace
}  // namespace sluice::proxy::testing
