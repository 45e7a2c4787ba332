// replay() and learn() over a store written through the audit Store API: how each kind of row is
// compared (docs/policy.md, "Learn, review, replay"): the policy's own decisions, an approver's
// answers, network failures, refusals no policy makes (limits), SSRF denials without a dialled
// address, DNS answers, rows a learn-mode run records as would_deny; and what learn makes of them.
#include "sluice/replay/replay.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "sluice/audit/store.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/replay/learn.hpp"

namespace sluice::replay {
namespace {

namespace fs = std::filesystem;
using audit::ConnectionKind;
using audit::Decision;

constexpr const char* kHead =
    "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n  rules:\n";
constexpr const char* kRecorded =
    "    - {id: api, action: allow, hosts: [api.test], ports: [443]}\n"
    "    - {id: approve, action: ask, hosts: [ask.test], ports: [443]}\n"
    "    - {id: items, action: allow, hosts: [items.test], ports: [80], methods: [GET], paths: "
    "[\"/v1/*\"]}\n";
constexpr const char* kGlobal = "93.184.216.34";

std::shared_ptr<const policy::Matcher> compile(const std::string& rules) {
  auto w = policy::parseWorkflow(std::string(kHead) + rules, "candidate.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  return policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
}

audit::ConnectionEvent conn(const std::string& id, ConnectionKind kind, const std::string& host,
                            std::uint16_t port, Decision d, const std::string& rule,
                            const std::string& reason, const std::string& ip = kGlobal) {
  audit::ConnectionEvent c;
  c.id = id;
  c.execution_id = "exec-1";
  c.workflow = "wf";
  c.policy_sha256 = base::sha256Hex(std::string(kHead) + kRecorded);
  c.ts_ms = 1'763'700'000'000;
  c.kind = kind;
  c.host = host;
  c.port = port;
  c.resolved_ip = ip;
  c.decision = d;
  c.rule_id = rule;
  c.reason = reason;
  c.tls =
      kind == ConnectionKind::kHttp ? audit::TlsHandling::kNone : audit::TlsHandling::kPassthrough;
  return c;
}

audit::RequestEvent request(const std::string& path, Decision d, const std::string& rule,
                            const std::string& reason) {
  audit::RequestEvent r;
  r.connection_id = "c-6";
  r.execution_id = "exec-1";
  r.workflow = "wf";
  r.ts_ms = 1'763'700'000'001;
  r.method = "GET";
  r.host = "items.test";
  r.path = path;
  r.status = d == Decision::kAllow ? 200 : 403;
  r.decision = d;
  r.rule_id = rule;
  r.reason = reason;
  return r;
}

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sluice-replay-unit-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One execution under kRecorded: every kind of row replay compares, and two it does not.
  void write() {
    auto store = audit::Store::open(db());
    ASSERT_TRUE(store) << store.error().message;
    auto& s = **store;
    const std::string yaml = std::string(kHead) + kRecorded;
    s.recordPolicy(base::sha256Hex(yaml), "wf", yaml);
    const auto https = ConnectionKind::kConnect;
    s.recordConnection(conn("c-1", https, "api.test", 443, Decision::kAllow, "api", "allowed"));
    auto ssrf = conn("c-2", https, "api.test", 443, Decision::kDeny, "api", "private_address", "");
    ssrf.detail = "api.test resolves to 10.0.0.7, a private address; reaching it needs a rule";
    s.recordConnection(ssrf);
    s.recordConnection(conn("c-3", https, "ask.test", 443, Decision::kAllow, "approve", "allowed"));
    s.recordConnection(
        conn("c-4", https, "ask.test", 443, Decision::kDeny, "approve", "approval_denied", ""));
    s.recordConnection(conn("c-5", https, "api.test", 443, Decision::kFail, "api", "dns", ""));
    s.recordConnection(
        conn("c-6", ConnectionKind::kHttp, "items.test", 80, Decision::kAllow, "items", "allowed"));
    s.recordConnection(conn("c-7", ConnectionKind::kBlocked, "10.1.1.1", 53, Decision::kDeny, "",
                            "protocol_not_allowed", ""));
    s.recordRequest(request("/v1/a", Decision::kAllow, "items", "allowed"));
    s.recordRequest(request("/v1/b", Decision::kDeny, "", "limit_exceeded"));
    s.recordRequest(request("/admin", Decision::kDeny, "items", "path_not_allowed"));
    s.recordRequest(request("/v2/x", Decision::kDeny, "items", "path_not_allowed"));
    audit::DnsEvent dns;
    dns.execution_id = "exec-1";
    dns.workflow = "wf";
    dns.name = "api.test";
    dns.qtype = "A";
    dns.answer = "198.18.0.1";
    dns.decision = Decision::kAllow;
    dns.rule_id = "api";
    dns.reason = "allowed";
    s.recordDns(dns);
    // exec-2: a database at an IP literal on a private address.
    auto literal =
        conn("c-8", https, "10.0.0.9", 5432, Decision::kAllow, "db", "allowed", "10.0.0.9");
    literal.execution_id = "exec-2";
    s.recordConnection(literal);
    audit::ExecutionRecord e;
    e.id = "exec-2";
    e.workflow = "wf";
    e.receipt_json = "{}";
    ASSERT_TRUE(s.recordExecution(e));
    e.id = "exec-1";
    e.workflow = "wf";
    e.policy_sha256 = base::sha256Hex(yaml);
    e.receipt_json = "{}";
    ASSERT_TRUE(s.recordExecution(e));
    store->reset();
    // A learn-mode run (`sluice run --learn`) records what its policy would have denied and
    // let through as would_deny; this build's Store has no such decision, so it is set here.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db().c_str(), &raw), SQLITE_OK);
    sqlite3_exec(raw, "UPDATE requests SET decision = 'would_deny' WHERE path = '/v2/x'", nullptr,
                 nullptr, nullptr);
    sqlite3_close(raw);
  }

  ReplayReport run(const std::string& rules) {
    auto h = History::open(db());
    EXPECT_TRUE(h);
    auto r = replay(*h, Scope{{"exec-1"}, std::nullopt, std::nullopt}, *compile(rules));
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : ReplayReport{};
  }

  fs::path db() const { return dir_ / "audit.db"; }
  fs::path dir_;
};

// `policy replay --execution` and `policy learn` refuse an id the store has no executions row for.
TEST_F(ReplayTest, AnExecutionNotInTheStoreIsRefused) {
  auto h = History::open(db());
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->requireExecutions({"exec-1", "exec-2"}));
  auto missing = h->requireExecutions({"exec-1", "exec-9"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, base::Code::kNotFound);
  EXPECT_NE(missing.error().message.find("'exec-9'"), std::string::npos);
  auto learned = learn(*h, {"exec-9"}, "wf");
  ASSERT_FALSE(learned);
  EXPECT_EQ(learned.error().code, base::Code::kNotFound);
}

TEST_F(ReplayTest, TheRecordedPolicyChangesNothing) {
  ReplayReport r = run(kRecorded);
  EXPECT_TRUE(r.differences.empty()) << replayText(r);
  EXPECT_EQ(r.counts.connections, 5u);  // c-1..c-5: tunnels, approvals, the SSRF denial, a fail
  EXPECT_EQ(r.counts.requests, 4u);     // the limit refusal by the recorded policy's verdict
  EXPECT_EQ(r.counts.dns, 1u);
  EXPECT_EQ(r.counts.not_compared, 2u);  // the origin connection, the blocked packet
  EXPECT_EQ(r.counts.unchanged, 10u);
}

TEST_F(ReplayTest, EachKindOfChangeIsNamed) {
  ReplayReport r =
      run("    - {id: api, action: allow, hosts: [api.test], ports: [443]}\n"
          "    - {id: approve, action: allow, hosts: [ask.test], ports: [443]}\n"
          "    - {id: items2, action: allow, hosts: [items.test], ports: [80], methods: [GET], "
          "paths: [\"/v1/a\", \"/v2/*\"]}\n");
  std::map<std::string, std::string> change;  // "kind seq/conn path" -> change
  for (const auto& d : r.differences)
    change[d.kind + " " + (d.kind == "connection" ? d.connection_id : d.path)] = d.change;
  const std::map<std::string, std::string> expected = {
      {"connection c-3", "ask"},          // approved by a person, now allowed outright
      {"connection c-4", "ask"},          // refused by a person, now allowed outright
      {"request /v1/a", "rule"},          // items -> items2
      {"request /v1/b", "allow->deny"},   // refused by a limit; the recorded policy allowed it
      {"request /v2/x", "deny->allow"}};  // would_deny, now allowed
  EXPECT_EQ(change, expected) << replayText(r);
  EXPECT_EQ(r.counts.changed(), 5u);
  for (const auto& d : r.differences) {
    if (d.path == "/v1/b") {
      EXPECT_NE(d.note.find("limit_exceeded"), std::string::npos);
    }
  }
}

TEST_F(ReplayTest, TheSsrfGuardDecidesAtTheAddressTheDenialNamed) {
  // Allowing private addresses for api.test turns the SSRF denial (no resolved_ip on the row,
  // the address in its detail) into an allow; nothing else changes.
  ReplayReport r = run(std::string(kRecorded) +
                       "    - {id: inside, action: allow, hosts: [api.test], ports: [443], cidrs: "
                       "[\"10.0.0.0/8\"], allow_private: true}\n");
  ASSERT_EQ(r.differences.size(), 1u) << replayText(r);
  EXPECT_EQ(r.differences[0].connection_id, "c-2");
  EXPECT_EQ(r.differences[0].change, "deny->allow");
}

TEST_F(ReplayTest, DnsAnswersAreComparedToo) {
  ReplayReport r = run(
      "    - {id: approve, action: ask, hosts: [ask.test], ports: [443]}\n"
      "    - {id: items, action: allow, hosts: [items.test], ports: [80], methods: [GET], paths: "
      "[\"/v1/*\"]}\n");
  bool dns = false;
  for (const auto& d : r.differences) {
    if (d.kind != "dns") continue;
    dns = true;
    EXPECT_EQ(d.change, "allow->deny");
    EXPECT_EQ(d.host, "api.test");
  }
  EXPECT_TRUE(dns) << replayText(r);
}

TEST_F(ReplayTest, LearnAllowsWhatWentThroughAndNothingElse) {
  auto h = History::open(db());
  ASSERT_TRUE(h);
  auto yaml = learn(*h, {"exec-1"}, "wf-learned");
  ASSERT_TRUE(yaml) << yaml.error().message;
  auto w = policy::parseWorkflow(*yaml, "learned.yaml");
  ASSERT_TRUE(w) << w.error().str() << *yaml;
  EXPECT_TRUE(w->warnings.empty()) << *yaml;
  auto m = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
  auto decide = [&](const char* host, std::uint16_t port, const char* path) {
    auto t = policy::makeTarget(host, port).value();
    auto req = policy::canonicalRequest("GET", path).value();
    auto ip = policy::parseIpLiteral(kGlobal).value();
    return m->decide({t, policy::Visibility::kPlainHttp, &req, &ip, true}).allowed;
  };
  EXPECT_TRUE(decide("items.test", 80, "/v1/a"));
  EXPECT_TRUE(decide("items.test", 80, "/v2/x"));    // would_deny: it went through
  EXPECT_FALSE(decide("items.test", 80, "/v1/b"));   // refused (a limit): not learned
  EXPECT_FALSE(decide("items.test", 80, "/admin"));  // refused by the policy
  EXPECT_NE(yaml->find("# covers 2 request(s)"), std::string::npos) << *yaml;
  auto tunnel = [&](const char* host) {
    auto t = policy::makeTarget(host, 443).value();
    return m->decide({t, policy::Visibility::kTunnel, nullptr, nullptr}).allowed;
  };
  EXPECT_TRUE(tunnel("api.test"));
  EXPECT_TRUE(tunnel("ask.test"));
  EXPECT_FALSE(tunnel("other.test"));
  EXPECT_FALSE(learn(*h, {"exec-none"}, "x"));
}

TEST_F(ReplayTest, AnIpLiteralIsLearnedAsItsAddressWithAllowPrivate) {
  auto h = History::open(db());
  ASSERT_TRUE(h);
  auto yaml = learn(*h, {"exec-2"}, "db");
  ASSERT_TRUE(yaml) << yaml.error().message;
  EXPECT_NE(yaml->find("cidrs: [\"10.0.0.9/32\"]\n        allow_private: true"), std::string::npos)
      << *yaml;
  EXPECT_EQ(yaml->find("hosts:"), std::string::npos) << *yaml;
  auto w = policy::parseWorkflow(*yaml, "learned.yaml");
  ASSERT_TRUE(w) << w.error().str() << *yaml;
  EXPECT_TRUE(w->warnings.empty()) << *yaml;
}

// A live update mid-execution: a request on a connection opened under generation 1 was decided
// under generation 2. Where replay needs the recorded policy's verdict (a limit refusal), it
// takes the request's own generation's policy, not its connection's.
TEST(ReplayGenerations, ARequestIsJudgedByItsOwnGenerationsPolicy) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-replay-gen-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string gen2_rules =
      "    - {id: items, action: allow, hosts: [items.test], ports: [80], methods: [GET], paths: "
      "[\"/v1/a\"]}\n";
  const std::string yaml1 = std::string(kHead) + kRecorded;
  const std::string yaml2 = std::string(kHead) + gen2_rules;
  {
    auto store = audit::Store::open(dir / "audit.db");
    ASSERT_TRUE(store) << store.error().message;
    auto& s = **store;
    s.recordPolicy(base::sha256Hex(yaml1), "wf", yaml1);
    s.recordPolicy(base::sha256Hex(yaml2), "wf", yaml2);
    auto origin =
        conn("c-6", ConnectionKind::kHttp, "items.test", 80, Decision::kAllow, "items", "allowed");
    origin.stamp.policy_generation = 1;
    s.recordConnection(origin);
    auto later = conn("c-9", ConnectionKind::kConnect, "api.test", 443, Decision::kDeny, "",
                      "no_matching_rule", "");
    later.policy_sha256 = base::sha256Hex(yaml2);
    later.stamp.policy_generation = 2;
    s.recordConnection(later);
    auto limited = request("/v1/b", Decision::kDeny, "", "limit_exceeded");
    limited.stamp.policy_generation = 2;
    s.recordRequest(limited);
  }
  auto h = History::open(dir / "audit.db");
  ASSERT_TRUE(h);
  auto r = replay(*h, Scope{{"exec-1"}, std::nullopt, std::nullopt}, *compile(gen2_rules));
  ASSERT_TRUE(r) << r.error().message;
  // Generation 2 refused /v1/b anyway, as the candidate does: nothing changes (judged by
  // generation 1's policy, the connection's, it would read as allow -> deny).
  EXPECT_EQ(r->counts.requests, 1u);
  EXPECT_TRUE(r->differences.empty()) << replayText(*r);
  fs::remove_all(dir);
}

// A connection row with no policy_sha256 of its own: a refusal no policy makes (a limit) is
// compared with the verdict of its execution's policy (the executions row), for each request.
TEST(ReplayExecutionPolicy, RowsWithoutTheirOwnPolicyTakeTheirExecutions) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-replay-exec-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string yaml = std::string(kHead) + kRecorded;
  {
    auto store = audit::Store::open(dir / "audit.db");
    ASSERT_TRUE(store) << store.error().message;
    auto& s = **store;
    s.recordPolicy(base::sha256Hex(yaml), "wf", yaml);
    auto origin =
        conn("c-6", ConnectionKind::kHttp, "items.test", 80, Decision::kAllow, "items", "allowed");
    origin.policy_sha256.clear();
    s.recordConnection(origin);
    s.recordRequest(request("/v1/b", Decision::kDeny, "", "limit_exceeded"));
    s.recordRequest(request("/v1/c", Decision::kDeny, "", "limit_exceeded"));
    audit::ExecutionRecord e;
    e.id = "exec-1";
    e.workflow = "wf";
    e.policy_sha256 = base::sha256Hex(yaml);
    e.receipt_json = "{}";
    ASSERT_TRUE(s.recordExecution(e));
  }
  auto h = History::open(dir / "audit.db");
  ASSERT_TRUE(h);
  const std::string narrowed =
      "    - {id: items, action: allow, hosts: [items.test], ports: [80], methods: [GET], paths: "
      "[\"/v1/b\"]}\n";
  auto r = replay(*h, Scope{{"exec-1"}, std::nullopt, std::nullopt}, *compile(narrowed));
  ASSERT_TRUE(r) << r.error().message;
  // The execution's policy allowed both paths: /v1/c is now denied, /v1/b is not.
  EXPECT_EQ(r->counts.requests, 2u);
  ASSERT_EQ(r->differences.size(), 1u) << replayText(*r);
  EXPECT_EQ(r->differences[0].path, "/v1/c");
  EXPECT_EQ(r->differences[0].change, "allow->deny");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::replay
