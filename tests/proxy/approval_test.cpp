// Approvals (`action: ask`): a passthrough CONNECT matched by an ask rule is held until the
// approval desk decides, without blocking other traffic; allow, deny, timeout, no desk, scope
// execution (also settling what it covers that is already pending), an ended execution
// (409-style kGone), a closed execution, a client that hangs up (a CONNECT and a plain HTTP
// request held), and 200 pending at once answered in random order.
// The request paths (plain HTTP, pipelined, reused, HTTP in CONNECT) are in pipeline_test.cpp's
// ask shapes; every approval is an audit row.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "approval_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

/// A pending approval of a GET request to host:port `path`, asked by rule "gate".
Approval gateRequest(std::string host, std::uint16_t port, std::string path) {
  Approval a;
  a.rule = "gate";
  a.host = std::move(host);
  a.port = port;
  a.method = "GET";
  a.path = std::move(path);
  return a;
}

TEST_F(ApprovalTest, ConnectWaitsForTheApproverThenTunnels) {
  Client c(port_, std::chrono::milliseconds(300));
  ASSERT_TRUE(c.ok());
  c.send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "other.test");
  EXPECT_EQ(a->port, up_.echoPort());
  EXPECT_EQ(a->rule, "ask-tunnel");
  EXPECT_EQ(a->workflow, "asking");
  EXPECT_EQ(a->execution_id, execution_id_);
  EXPECT_FALSE(a->method) << "a tunnel's approval has no method";
  EXPECT_FALSE(a->path);
  EXPECT_GT(a->expires_at_ms, a->asked_at_ms);
  // Held: nothing is answered, nothing reaches the upstream.
  EXPECT_EQ(c.readResponse(true).status, 0);
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  ASSERT_EQ(approvals_->pending().size(), 1u);
  EXPECT_EQ(approvals_->answer(a->id, true, Scope::kOnce, "tester"), AnswerStatus::kAnswered);
  auto est = c.readResponse(true);
  EXPECT_EQ(est.status, 200);
  c.send("ping");
  EXPECT_EQ(c.readN(4), "ping");
  auto rows = approvalRows(1);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, a->id);
  EXPECT_EQ(rows[0].decision, audit::Decision::kAllow);
  EXPECT_EQ(rows[0].decided_by, "tester");
  EXPECT_EQ(rows[0].scope, audit::ApprovalScope::kOnce);
  EXPECT_EQ(rows[0].rule_id, "ask-tunnel");
  EXPECT_TRUE(rows[0].method.empty());
  EXPECT_GE(rows[0].decided_at_ms, rows[0].asked_at_ms);
  // A second answer to the same approval is refused: it is no longer pending.
  EXPECT_EQ(approvals_->answer(a->id, false, Scope::kOnce, "late"), AnswerStatus::kGone);
  EXPECT_EQ(approvals_->answer("ap-0000000000000000", true, Scope::kOnce, "x"),
            AnswerStatus::kNotFound);
}

TEST_F(ApprovalTest, DeniedConnectGets403AndNeverReachesTheUpstream) {
  Client c(port_);
  c.send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  approvals_->answer(a->id, false, Scope::kOnce, "tester");
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
  EXPECT_NE(r.body.find("tester"), std::string::npos) << r.body;
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  auto row = sink_->waitConnection([](const audit::ConnectionEvent& e) {
    return e.decision == audit::Decision::kDeny && e.reason == "approval_denied";
  });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->rule_id, "ask-tunnel");
  EXPECT_EQ(approvalRows(1).at(0).decision, audit::Decision::kDeny);
  EXPECT_EQ(approvalRows(1).at(0).reason, "approval_denied");
}

TEST_F(ApprovalTest, NoAnswerInTimeIsApprovalTimeout) {
  timeout_ = "300ms";
  proxy_->stop();
  startProxy();
  Client c(port_);
  c.send(connectRequest(echo()));
  ASSERT_TRUE(nextRaised());
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_timeout");
  auto rows = approvalRows(1);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].reason, "approval_timeout");
  EXPECT_EQ(rows[0].decided_by, "timeout");
  EXPECT_TRUE(approvals_->pending().empty());
}

TEST_F(ApprovalTest, OtherTrafficFlowsWhileOneWaits) {
  Client held(port_);
  held.send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  // An allowed request on another connection is answered while the approval is pending.
  auto r =
      roundTrip("GET http://" + upstream() + "/ok HTTP/1.1\r\nHost: " + upstream() + "\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(approvals_->pending().size(), 1u);
  approvals_->answer(a->id, true, Scope::kOnce, "tester");
  EXPECT_EQ(held.readResponse(true).status, 200);
}

TEST_F(ApprovalTest, ScopeExecutionCoversTheSameRuleHostAndPort) {
  Client first(port_);
  first.send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  approvals_->answer(a->id, true, Scope::kExecution, "tester");
  ASSERT_EQ(first.readResponse(true).status, 200);
  // Same rule, host and port: allowed at once, no new approval for anyone to answer.
  Client second(port_);
  second.send(connectRequest(echo()));
  EXPECT_EQ(second.readResponse(true).status, 200);
  EXPECT_FALSE(nextRaised(std::chrono::milliseconds(200)));
  auto rows = approvalRows(2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].decision, audit::Decision::kAllow);
  EXPECT_EQ(rows[1].scope, audit::ApprovalScope::kExecution);
  EXPECT_EQ(rows[1].decided_by.rfind("scope:execution of " + a->id, 0), 0u) << rows[1].decided_by;
  // Another port of the same host is another question.
  Client third(port_);
  third.send(connectRequest("other.test:" + std::to_string(up_.httpPort())));
  auto b = nextRaised();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->port, up_.httpPort());
  approvals_->answer(b->id, false, Scope::kOnce, "tester");
  EXPECT_EQ(third.readResponse().status, 403);
}

// A `scope: execution` answer also settles what is already pending that it covers: an agent
// that opened three connections to one host at once is not left with two waiting. The same
// host on another port, and the same host:port of another execution (a second listener on the
// same desk), stay pending.
TEST_F(ApprovalTest, ScopeExecutionAllowReleasesTheOthersAlreadyPending) {
  ListenerIdentity second{"exec-2", matcher_};
  second.approvals = approvals_;
  auto port2 = proxy_->listen("127.0.0.1", 0, second);
  ASSERT_TRUE(port2) << port2.error().message;
  std::vector<Held> same;
  for (int i = 0; i < 3; ++i) same.push_back(hold(port_, echo()));
  const auto short_wait = std::chrono::milliseconds(300);
  Held other_port = hold(port_, "other.test:" + std::to_string(up_.httpPort()), short_wait);
  Held other_exec = hold(*port2, echo(), short_wait);
  ASSERT_EQ(other_exec.approval.execution_id, "exec-2");
  ASSERT_EQ(approvals_->pending().size(), 5u);
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);

  const std::string answered = same[1].approval.id;
  ASSERT_EQ(approvals_->answer(answered, true, Scope::kExecution, "tester"),
            AnswerStatus::kAnswered);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("same-host client " + std::to_string(i));
    ASSERT_EQ(same[i].client->readResponse(true).status, 200);
    const std::string word = "s" + std::to_string(i);
    same[i].client->send(word);
    EXPECT_EQ(same[i].client->readN(word.size()), word);
  }
  EXPECT_EQ(up_.echoLog().accepted.load(), 3);
  std::vector<std::string> left{other_port.approval.id, other_exec.approval.id};
  std::sort(left.begin(), left.end());
  EXPECT_EQ(pendingIds(), left);
  EXPECT_EQ(other_port.client->readResponse(true).status, 0) << "another port was released";
  EXPECT_EQ(other_exec.client->readResponse(true).status, 0) << "another execution was released";

  auto rows = approvalRows(3);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].id, answered) << "the answered approval's row comes first";
  EXPECT_EQ(rows[0].decided_by, "tester");
  for (int i : {0, 2}) {
    SCOPED_TRACE("settled client " + std::to_string(i));
    expectSettledRow(rows, same[i].approval.id, answered, audit::Decision::kAllow, "");
    EXPECT_EQ(approvals_->answer(same[i].approval.id, false, Scope::kOnce, "late"),
              AnswerStatus::kGone);
  }
  // The two left are still answerable on their own.
  for (Held* h : {&other_port, &other_exec}) {
    EXPECT_EQ(approvals_->answer(h->approval.id, false, Scope::kOnce, "tester"),
              AnswerStatus::kAnswered);
    EXPECT_EQ(h->client->readResponse().status, 403);
  }
}

TEST_F(ApprovalTest, ScopeExecutionDenyRefusesTheOthersAlreadyPending) {
  std::vector<Held> same;
  for (int i = 0; i < 3; ++i) same.push_back(hold(port_, echo()));
  Held other_port =
      hold(port_, "other.test:" + std::to_string(up_.httpPort()), std::chrono::milliseconds(300));
  const std::string answered = same[0].approval.id;
  ASSERT_EQ(approvals_->answer(answered, false, Scope::kExecution, "tester"),
            AnswerStatus::kAnswered);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("same-host client " + std::to_string(i));
    auto r = same[i].client->readResponse();
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
  }
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  EXPECT_EQ(pendingIds(), std::vector<std::string>{other_port.approval.id});
  EXPECT_EQ(other_port.client->readResponse(true).status, 0) << "another port was refused";
  auto rows = approvalRows(3);
  ASSERT_EQ(rows.size(), 3u);
  for (int i : {1, 2}) {
    SCOPED_TRACE("settled client " + std::to_string(i));
    expectSettledRow(rows, same[i].approval.id, answered, audit::Decision::kDeny,
                     "approval_denied");
  }
}

// Held requests too: a `scope: execution` answer settles those of the same method whatever their
// path; a request of another method stays pending (the approver was shown one method).
TEST_F(ApprovalTest, ScopeExecutionReleasesPendingRequestsOfTheSameMethodWhateverTheirPath) {
  const std::string plain = "other.test:" + std::to_string(up_.httpPort());
  Client first(port_), second(port_), third(port_, std::chrono::milliseconds(300));
  first.send(getRequest(plain, "/first"));
  auto a = nextRaised();
  second.send(getRequest(plain, "/second"));
  auto b = nextRaised();
  third.send(getRequest(plain, "/third", "", "HEAD"));
  auto c = nextRaised();
  ASSERT_TRUE(a && b && c);
  ASSERT_EQ(approvals_->answer(a->id, true, Scope::kExecution, "tester"), AnswerStatus::kAnswered);
  EXPECT_EQ(first.readResponse().status, 200);
  EXPECT_EQ(second.readResponse().status, 200);
  EXPECT_EQ(pendingIds(), std::vector<std::string>{c->id}) << "a HEAD was settled by a GET grant";
  EXPECT_EQ(third.readResponse(true).status, 0) << "the HEAD was released";
  auto row = rowOf(approvalRows(2), b->id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->path, "/second");
  EXPECT_EQ(row->scope, audit::ApprovalScope::kExecution);
  EXPECT_EQ(row->decided_by, "scope:execution of " + a->id + " (tester)");
  ASSERT_EQ(approvals_->answer(c->id, false, Scope::kOnce, "tester"), AnswerStatus::kAnswered);
  EXPECT_EQ(third.readResponse(true).header("x-sluice-reason"), "approval_denied");
}

// A grant covers what the approver was shown. `allow execution` on a GET
// covers later GETs only: a POST and a DELETE to the same host are asked again. `scope: host`
// on one of them covers every method (the DELETE already pending is settled by it, a later
// PUT and GET are decided at once), and each row names the grant that decided it.
TEST_F(ApprovalTest, AnExecutionGrantOnAGetIsNotAGrantForOtherMethodsButScopeHostIs) {
  const std::string plain = "other.test:" + std::to_string(up_.httpPort());
  Client get(port_);
  get.send(getRequest(plain, "/read"));
  auto g = nextRaised();
  ASSERT_TRUE(g);
  ASSERT_EQ(approvals_->answer(g->id, true, Scope::kExecution, "tester"), AnswerStatus::kAnswered);
  ASSERT_EQ(get.readResponse().status, 200);
  // Another GET, another path: covered, nobody asked.
  Client get2(port_);
  get2.send(getRequest(plain, "/read-more"));
  EXPECT_EQ(get2.readResponse().status, 200);
  EXPECT_FALSE(nextRaised(std::chrono::milliseconds(200))) << "a covered GET was asked";
  // POST and DELETE: asked again, held until answered.
  Client post(port_, std::chrono::milliseconds(300)), del(port_, std::chrono::milliseconds(300));
  post.send(getRequest(plain, "/write", "Content-Length: 0\r\n", "POST"));
  auto p = nextRaised();
  del.send(getRequest(plain, "/write", "", "DELETE"));
  auto d = nextRaised();
  ASSERT_TRUE(p && d) << "POST or DELETE was not asked again after a GET's execution grant";
  EXPECT_EQ(p->method, "POST");
  EXPECT_EQ(d->method, "DELETE");
  EXPECT_EQ(post.readResponse(true).status, 0) << "the POST went through on the GET's grant";
  EXPECT_EQ(del.readResponse(true).status, 0) << "the DELETE went through on the GET's grant";
  // `scope: host` on the POST: the POST and the pending DELETE go through; a later PUT and GET
  // are decided at once by it (the latest grant that covers them).
  ASSERT_EQ(approvals_->answer(p->id, true, Scope::kHost, "tester"), AnswerStatus::kAnswered);
  EXPECT_EQ(post.readResponse(true).status, 200);
  EXPECT_EQ(del.readResponse(true).status, 200);
  EXPECT_TRUE(approvals_->pending().empty());
  Client put(port_), get3(port_);
  put.send(getRequest(plain, "/put", "Content-Length: 0\r\n", "PUT"));
  EXPECT_EQ(put.readResponse().status, 200);
  get3.send(getRequest(plain, "/read-again"));
  EXPECT_EQ(get3.readResponse().status, 200);
  EXPECT_FALSE(nextRaised(std::chrono::milliseconds(200))) << "a request covered by host was asked";

  // The rows: each names the grant that decided it, and its scope.
  auto rows = approvalRows(6);
  ASSERT_EQ(rows.size(), 6u);
  auto byPath = [&](const std::string& method, const std::string& path) {
    for (const auto& r : rows)
      if (r.method == method && r.path == path) return r;
    ADD_FAILURE() << "no row for " << method << " " << path;
    return audit::ApprovalEvent{};
  };
  auto expectRow = [](const audit::ApprovalEvent& r, audit::ApprovalScope scope,
                      const std::string& by) {
    EXPECT_EQ(r.decision, audit::Decision::kAllow) << r.method << " " << r.path;
    EXPECT_EQ(r.scope, scope) << r.method << " " << r.path;
    EXPECT_EQ(r.decided_by, by) << r.method << " " << r.path;
  };
  expectRow(byPath("GET", "/read"), audit::ApprovalScope::kExecution, "tester");
  expectRow(byPath("GET", "/read-more"), audit::ApprovalScope::kExecution,
            "scope:execution of " + g->id + " (tester)");
  expectRow(byPath("POST", "/write"), audit::ApprovalScope::kHost, "tester");
  expectRow(byPath("DELETE", "/write"), audit::ApprovalScope::kHost,
            "scope:host of " + p->id + " (tester)");
  expectRow(byPath("PUT", "/put"), audit::ApprovalScope::kHost,
            "scope:host of " + p->id + " (tester)");
  expectRow(byPath("GET", "/read-again"), audit::ApprovalScope::kHost,
            "scope:host of " + p->id + " (tester)");
}

// A request an approver let through is sent again on a fresh connection when its kept-alive
// upstream connection turns out stale, and that connection is vetted by the approved rule, as
// the admission vetted the first one: it was vetted without the approval, so the ask rule
// refused the request it had just granted (403 approval_required).
TEST_F(ApprovalTest, AnApprovedRequestIsSentAgainWhenItsKeptAliveConnectionWentStale) {
  const std::string plain = "other.test:" + std::to_string(up_.httpPort());
  Client client(port_);
  client.send(getRequest(plain, "/drop-next"));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  ASSERT_EQ(approvals_->answer(a->id, true, Scope::kHost, "tester"), AnswerStatus::kAnswered);
  auto first = client.readResponse();
  ASSERT_EQ(first.status, 200);
  ASSERT_FALSE(first.closed);
  // The same client connection, so the same kept-alive upstream one, which the upstream drops
  // when this request reaches it: the proxy dials again and sends it there.
  client.send(getRequest(plain, "/after-drop"));
  auto second = client.readResponse();
  EXPECT_EQ(second.status, 200) << second.header("x-sluice-reason") << " "
                                << second.header("x-sluice-detail");
  EXPECT_NE(second.body.find("GET /after-drop"), std::string::npos) << second.body;
  EXPECT_FALSE(nextRaised(std::chrono::milliseconds(200))) << "the covered request was asked";
}

// A tunnel shows no method: `scope: host` covers its host and port as `scope: execution` does.
TEST_F(ApprovalTest, ScopeHostOnATunnelCoversTheHostAndPort) {
  auto first = std::make_unique<Client>(port_);
  first->send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  approvals_->answer(a->id, true, Scope::kHost, "tester");
  ASSERT_EQ(first->readResponse(true).status, 200);
  auto second = std::make_unique<Client>(port_);
  second->send(connectRequest(echo()));
  EXPECT_EQ(second->readResponse(true).status, 200);
  EXPECT_FALSE(nextRaised(std::chrono::milliseconds(200)));
  auto rows = approvalRows(2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].scope, audit::ApprovalScope::kHost);
  EXPECT_EQ(rows[1].scope, audit::ApprovalScope::kHost);
  EXPECT_EQ(rows[1].decided_by, "scope:host of " + a->id + " (tester)");
  // The tunnels' connection rows name their approval, and the grant that decided the second.
  first.reset();
  second.reset();
  for (const auto& [id, by] : {std::pair{rows[0].id, std::string("tester")},
                               std::pair{rows[1].id, "scope:host of " + a->id + " (tester)"}}) {
    auto row = sink_->waitConnection([&](const audit::ConnectionEvent& e) {
      // Its own id closes the detail (the second's also names the first's, as its grant).
      return e.decision == audit::Decision::kAllow && e.detail.ends_with(", " + id + ")");
    });
    ASSERT_TRUE(row) << "no connection row names " << id;
    EXPECT_EQ(row->detail,
              "rule ask-tunnel allows " + echo() + " (approved by " + by + ", " + id + ")");
  }
}

// What approvers are told each scope covers: for a request, `execution` keeps the method and
// `host` names every method; for a tunnel both name the host and port; the JSON carries it.
TEST(ApprovalCovers, EachScopeSaysWhatItWouldCover) {
  Approval req = gateRequest("api.example", 443, "/v1/x");
  ScopeCovers c = scopeCovers(req);
  EXPECT_EQ(c.once, "this GET request only");
  EXPECT_EQ(c.execution,
            "GET requests to api.example:443 matched by rule gate, any path, until the "
            "execution ends");
  EXPECT_EQ(c.host,
            "requests of every method to api.example:443 matched by rule gate, any path, until "
            "the execution ends");
  Approval tunnel = req;
  tunnel.method.reset();
  tunnel.path.reset();
  tunnel.host = "::1";
  c = scopeCovers(tunnel);
  EXPECT_EQ(c.once, "this connection only");
  EXPECT_EQ(c.execution,
            "every connection and request to [::1]:443 matched by rule gate, until the execution "
            "ends");
  EXPECT_EQ(c.host, c.execution);
  auto j = nlohmann::json::parse(approvalJson(req));
  EXPECT_EQ(j["covers"]["once"], "this GET request only");
  EXPECT_EQ(j["covers"]["host"], scopeCovers(req).host);
  for (const char* name : {"once", "execution", "host"}) {
    ASSERT_TRUE(parseScope(name)) << name;
    EXPECT_EQ(scopeName(*parseScope(name)), name);
  }
  EXPECT_FALSE(parseScope("forever"));
  EXPECT_FALSE(parseScope("Execution"));
}

// What --approve-with's command reads on stdin (and the stream's approval line): one line of
// valid JSON, control bytes escaped and bytes that are not UTF-8 replaced, whatever was sent.
TEST(ApprovalJson, IsOneLineOfValidJsonWhateverTheHostAndPath) {
  Approval a =
      gateRequest("h\x1b[2J.example", 80, std::string("/a\r\n{\"x\":1}\n\xff\xfe\x1b]0;t\x07", 20));
  const std::string text = approvalJson(a);
  for (unsigned char c : text) EXPECT_GE(c, 0x20) << "raw control byte in " << text;
  auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j["host"], a.host);
  EXPECT_EQ(j["path"].get<std::string>().substr(0, 11), "/a\r\n{\"x\":1}");
  EXPECT_NE(j["path"].get<std::string>().find("\xef\xbf\xbd"), std::string::npos)
      << "invalid UTF-8 not replaced";
}

// Text from the sandbox shown to a person: control bytes (ESC, CR, LF, DEL) and non-ASCII are
// escaped, a backslash doubled, and a long value cut with "...".
TEST(ApprovalDisplayText, EscapesControlBytesAndCutsWithAnEllipsis) {
  EXPECT_EQ(displayText("/ok/path?"), "/ok/path?");
  EXPECT_EQ(displayText(std::string("/a\x1b[2J\rb\n\x7f\xc3\xa9\\", 13)),
            "/a\\x1b[2J\\x0db\\x0a\\x7f\\xc3\\xa9\\\\");
  EXPECT_EQ(displayText(std::string(100, 'a'), 10), "aaaaaaa...");
  EXPECT_EQ(displayText(std::string(10, 'a'), 10), std::string(10, 'a'));
  EXPECT_EQ(displayText(std::string(100, '\x1b'), 12), "\\x1b\\x1b...");
}

// A `scope: once` answer settles only its own approval; a later `scope: execution` answer to one
// of those left then settles the rest.
TEST_F(ApprovalTest, ScopeOnceLeavesTheOthersPending) {
  std::vector<Held> same;
  for (int i = 0; i < 3; ++i) same.push_back(hold(port_, echo(), std::chrono::milliseconds(300)));
  ASSERT_EQ(approvals_->answer(same[0].approval.id, true, Scope::kOnce, "tester"),
            AnswerStatus::kAnswered);
  ASSERT_EQ(same[0].client->readResponse(true).status, 200);
  std::vector<std::string> left{same[1].approval.id, same[2].approval.id};
  std::sort(left.begin(), left.end());
  EXPECT_EQ(pendingIds(), left);
  EXPECT_EQ(same[1].client->readResponse(true).status, 0) << "released by a once answer";
  EXPECT_EQ(same[2].client->readResponse(true).status, 0) << "released by a once answer";
  EXPECT_EQ(approvals_->answer(same[2].approval.id, false, Scope::kExecution, "tester"),
            AnswerStatus::kAnswered);
  EXPECT_EQ(same[1].client->readResponse().header("x-sluice-reason"), "approval_denied");
  EXPECT_EQ(same[2].client->readResponse().header("x-sluice-reason"), "approval_denied");
  EXPECT_TRUE(approvals_->pending().empty());
  auto row = rowOf(approvalRows(3), same[1].approval.id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decided_by, "scope:execution of " + same[2].approval.id + " (tester)");
  EXPECT_EQ(up_.echoLog().accepted.load(), 1);
}

TEST_F(ApprovalTest, EndedExecutionRefusesWhatWaitsAndLaterAnswers) {
  Client c(port_);
  c.send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  approvals_->endExecution(execution_id_);
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "execution_ended");
  EXPECT_EQ(approvals_->answer(a->id, true, Scope::kOnce, "late"), AnswerStatus::kGone);
  // New asks of an ended execution are refused at once (its program is being torn down).
  Client again(port_);
  again.send(connectRequest(echo()));
  EXPECT_EQ(again.readResponse().header("x-sluice-reason"), "execution_ended");
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
}

TEST_F(ApprovalTest, ClosingTheExecutionWithdrawsItsApprovals) {
  Client c(port_);
  c.send(connectRequest(echo()));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  const auto t0 = std::chrono::steady_clock::now();
  proxy_->closeExecution(execution_id_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500))
      << "closeExecution waited for the approval instead of withdrawing it";
  EXPECT_TRUE(approvals_->pending().empty());
  auto rows = approvalRows(1);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].decision, audit::Decision::kDeny);
  EXPECT_EQ(rows[0].reason, "closed");
  EXPECT_TRUE(c.waitClosed());
}

// A client that hangs up while it waits withdraws its approval (reason closed): it is no longer
// listed, a late answer finds it gone, its row says closed, and nothing reaches the upstream.
// Both kinds of hold: a CONNECT (the session's) and a plain HTTP request (the exchange's), each
// also with bytes sent after it and left unread before the hang-up (a TLS ClientHello sent
// early into a tunnel, the next pipelined request), which must not hide the hang-up.
TEST_F(ApprovalTest, AClientThatHangsUpWithdrawsItsApproval) {
  struct Hold {
    std::string name;
    std::string request;
    UpstreamLog& upstream;
    bool has_method;
    std::string then = "";  // sent once the approval is raised, before the hang-up
  };
  timeout_ = "60s";  // well past the wait below: only the hang-up can end these approvals
  proxy_->stop();
  startProxy();
  const std::string plain = "other.test:" + std::to_string(up_.httpPort());
  const Hold holds[] = {
      {"CONNECT", connectRequest(echo()), up_.echoLog(), false},
      {"plain HTTP", getRequest(plain, "/held"), up_.httpLog(), true},
      {"CONNECT, then early tunnel bytes", connectRequest(echo()), up_.echoLog(), false,
       std::string("\x16\x03\x01\x00\x05hello", 10)},
      {"plain HTTP, then a pipelined request", getRequest(plain, "/held"), up_.httpLog(), true,
       "GET /next HTTP/1.1\r\nHost: " + plain + "\r\n"},
  };
  std::size_t n = 0;
  for (const Hold& h : holds) {
    SCOPED_TRACE(h.name);
    auto c = std::make_unique<Client>(port_);
    ASSERT_TRUE(c->ok());
    c->send(h.request);
    auto a = nextRaised();
    ASSERT_TRUE(a);
    EXPECT_EQ(a->method.has_value(), h.has_method) << "not the hold under test";
    ASSERT_EQ(approvals_->pending().size(), 1u);
    if (!h.then.empty()) {
      c->send(h.then);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(approvals_->pending().size(), 1u) << "bytes are not a hang-up";
    }
    c.reset();  // the client goes away while it waits
    for (int i = 0; i < 500 && !approvals_->pending().empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(approvals_->pending().empty()) << "an approval nobody waits for is still pending";
    EXPECT_EQ(approvals_->answer(a->id, true, Scope::kOnce, "late"), AnswerStatus::kGone);
    auto rows = approvalRows(++n);
    ASSERT_EQ(rows.size(), n);
    EXPECT_EQ(rows.back().id, a->id);
    EXPECT_EQ(rows.back().decision, audit::Decision::kDeny);
    EXPECT_EQ(rows.back().reason, "closed");
    EXPECT_EQ(h.upstream.accepted.load(), 0) << "an upstream connection was made";
  }
}

TEST_F(ApprovalTest, TwoHundredPendingAnsweredInAnyOrderReleaseExactlyTheirOwn) {
  constexpr int kN = 200;
  auto lo = *policy::parseIpLiteral("127.0.0.1");
  for (int i = 0; i < kN; ++i) resolver_->add("h" + std::to_string(i) + ".ask.test", {lo});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kN; ++i) {
    clients.push_back(std::make_unique<Client>(port_, std::chrono::seconds(10)));
    ASSERT_TRUE(clients.back()->ok());
    clients.back()->send(
        connectRequest("h" + std::to_string(i) + ".ask.test:" + std::to_string(up_.echoPort())));
  }
  std::vector<Approval> raised;
  while (raised.size() < kN) {
    auto a = nextRaised();
    ASSERT_TRUE(a) << "only " << raised.size() << " approvals raised";
    raised.push_back(*a);
  }
  EXPECT_EQ(approvals_->pending().size(), static_cast<std::size_t>(kN));
  std::mt19937 rng(20261123);
  std::shuffle(raised.begin(), raised.end(), rng);
  // Host hN is allowed when N is even.
  for (const auto& a : raised) {
    const int n = std::stoi(a.host.substr(1, a.host.find('.') - 1));
    EXPECT_EQ(approvals_->answer(a.id, n % 2 == 0, Scope::kOnce, "tester"),
              AnswerStatus::kAnswered);
  }
  for (int i = 0; i < kN; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    auto r = clients[i]->readResponse(true);
    if (i % 2 == 0) {
      ASSERT_EQ(r.status, 200);
      const std::string word = "c" + std::to_string(i);
      clients[i]->send(word);
      EXPECT_EQ(clients[i]->readN(word.size()), word);
    } else {
      EXPECT_EQ(r.status, 403);
      EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
    }
  }
  EXPECT_EQ(up_.echoLog().accepted.load(), kN / 2);
  EXPECT_EQ(approvalRows(kN).size(), static_cast<std::size_t>(kN));
}

// Without anyone to answer (no desk), an ask rule's match is refused at once, with the reason.
class NoApproverTest : public ProxyFixture {
 protected:
  std::string policyYaml() override { return askPolicy(); }
};

TEST_F(NoApproverTest, AskIsRefusedAtOnceAsApprovalUnavailable) {
  Client c(port_);
  c.send(connectRequest(echo()));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_unavailable");
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
}

}  // namespace
}  // namespace sluice::proxy::testing
