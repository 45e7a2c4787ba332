// Approvals in `sluice serve`: a streamed run whose program curls a loopback
// upstream through an `ask` rule shows a {"type":"approval"} line; GET /v1/approvals lists it
// for approvers only; POST /v1/approvals/{id} allows (the program gets the upstream's 200) or
// denies (403, X-Sluice-Reason approval_denied, nothing reaches the upstream); answering twice is
// 409, an unknown id 404, a bad body 400, an approval whose run ended 409; `sluice approvals
// list|allow|deny` against the running daemon over its Unix socket and over TCP with a token;
// the approvals audit rows (caller, decided_by, scope). Responses are validated against
// schemas/api.v1.yaml.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "canned_server.hpp"
#include "isolation.hpp"
#include "proc_scan.hpp"
#include "serve_client.hpp"
#include "sluice/serve/server.hpp"

namespace fs = std::filesystem;
namespace serve = sluice::serve;
using nlohmann::json;

namespace {

using serve_test::expectSchema;
using serve_test::Http;
using serve_test::Response;
using sluice::testing::CannedServer;
using sluice::testing::readRequestHead;
using sluice::testing::shellOutput;

constexpr const char* kAgentA = "aaaaaaaaaaaaaaaaaaaaaaaa";  // not an approver
constexpr const char* kAgentB = "bbbbbbbbbbbbbbbbbbbbbbbb";  // approver

// A loopback HTTP upstream: answers every request with 200 "upstream-ok PATH" and remembers
// the request lines it got.
class Upstream {
 public:
  Upstream() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0)
      return;
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Upstream() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  std::uint16_t port() const { return port_; }
  std::vector<std::string> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  bool saw(const std::string& path) {
    for (const auto& l : seen())
      if (l.find(" " + path + " ") != std::string::npos) return true;
    return false;
  }

 private:
  void serve() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (stop_) return;
        continue;
      }
      const std::string req = readRequestHead(c);
      const std::string line = req.substr(0, req.find("\r\n"));
      {
        std::lock_guard lock(mu_);
        seen_.push_back(line);
      }
      const auto sp = line.find(' ');
      const std::string path = line.substr(sp + 1, line.rfind(' ') - sp - 1);
      const std::string body = "upstream-ok " + path + "\n";
      const std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                               "\r\nConnection: close\r\n\r\n" + body;
      (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> seen_;
};

class ServeApprovals : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = serve_test::freshTestDir("sluice-serve-ap");
    ASSERT_NE(up_.port(), 0);
    const std::string port = std::to_string(up_.port());
    // gate: asks for the loopback upstream; short: a run whose sandbox timeout ends it while
    // its approval is pending.
    for (auto [name, timeout] : {std::pair{"gate", "60s"}, std::pair{"short", "2s"}}) {
      std::ofstream(dir_ / "policies" / (std::string(name) + ".yaml"))
          << "apiVersion: sluice/v1\nkind: Workflow\nname: " << name
          << "\nsandbox:\n  timeout: " << timeout
          << "\n  network: proxy\negress:\n  rules:\n"
             "    - id: loopback-gate\n      action: ask\n      cidrs: [\"127.0.0.1/32\"]\n"
             "      allow_private: true\n      ports: ["
          << port << "]\n      ask: {timeout: 50s}\n";
    }
    serve_test::writeTokenFile(
        dir_, std::string("agent-a ") + kAgentA + "\n" + "agent-b " + kAgentB + " approver\n");
  }
  void TearDown() override {
    if (server_) server_->drain();
    server_.reset();
    fs::remove_all(dir_);
  }
  void start(std::vector<unsigned> approver_uids = {}) {
    serve::ServeOptions o;
    o.approver_uids = std::move(approver_uids);
    o.policy_dir = (dir_ / "policies").string();
    o.listens = {"unix:" + socket(), "127.0.0.1:0"};
    o.audit_db = db();
    o.token_file = (dir_ / "tokens").string();
    o.drain = std::chrono::milliseconds(1500);
    auto s = serve::Server::create(std::move(o));
    ASSERT_TRUE(s.has_value()) << s.error();
    server_ = std::move(*s);
    auto r = server_->start();
    ASSERT_TRUE(r.has_value()) << r.error();
    for (const auto& e : server_->endpoints())
      if (!e.starts_with("unix:"))
        port_ = static_cast<std::uint16_t>(std::stoi(e.substr(e.rfind(':') + 1)));
  }
  std::string socket() const { return (dir_ / "sluice.sock").string(); }
  std::string db() const { return (dir_ / "audit.db").string(); }
  Response call(const std::string& method, const std::string& target,
                const std::string& body = "") {
    auto h = Http::unix(socket());
    EXPECT_TRUE(h.ok());
    h.send(method, target, body);
    return h.read();
  }
  Response callTcp(const std::string& token, const std::string& method, const std::string& target,
                   const std::string& body = "") {
    auto h = Http::tcp(port_);
    EXPECT_TRUE(h.ok());
    h.send(method, target, body, "Authorization: Bearer " + token + "\r\n");
    return h.read();
  }
  void expectError(const Response& r, int status, const std::string& reason) {
    EXPECT_EQ(r.status, status) << r.body;
    auto j = r.js();
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["reason"], reason) << r.body;
    expectSchema("Error", j);
  }
  // `sluice approvals ARGS` (shell text): exit status and output (stdout and stderr).
  std::pair<int, std::string> cli(const std::string& args) {
    return shellOutput(std::string(SLUICE_BINARY) + " approvals " + args);
  }
  long count(const std::string& q) {
    const std::string out = shellOutput(std::string(SLUICE_BINARY) + " audit sql --db " + db() +
                                        " --format csv \"" + q + "\"")
                                .second;
    const auto nl = out.find('\n');
    return nl == std::string::npos ? -1 : std::atol(out.c_str() + nl + 1);
  }

  // A streamed run of `workflow` whose program curls the upstream at `path` and prints
  // "code=N reason=R body=B".
  struct Stream {
    Http h;
    std::vector<json> events;
    // Reads events until one of `type`; returns it (an empty object at the end of the stream).
    json until(const std::string& type) {
      for (std::string line = h.nextLine(); !line.empty(); line = h.nextLine()) {
        events.push_back(json::parse(line, nullptr, false));
        expectSchema("StreamEvent", events.back());
        if (events.back()["type"] == type) return events.back();
      }
      return json::object();
    }
  };
  Stream streamRun(const std::string& workflow, const std::string& path) {
    Stream s{Http::unix(socket()), {}};
    const std::string url = "http://127.0.0.1:" + std::to_string(up_.port()) + path;
    const json body = {
        {"workflow", workflow},
        {"argv",
         {"/bin/sh", "-c",
          "code=$(curl -s --max-time 55 -D /tmp/h -o /tmp/b -w '%{http_code}' " + url +
              "); echo \"code=$code reason=$(grep -i '^x-sluice-reason:' /tmp/h | tr -d '\\r' | "
              "cut -d' ' -f2) body=$(head -c 60 /tmp/b)\""}}};
    s.h.send("POST", "/v1/runs", body.dump(), "Accept: application/x-ndjson\r\n");
    EXPECT_EQ(s.h.readHead().status, 200);
    return s;
  }
  static std::string stdoutOf(const json& receipt) {
    return receipt.contains("receipt") ? receipt["receipt"]["stdout"]["text"].get<std::string>()
                                       : "<no receipt>";
  }

  Upstream up_;
  fs::path dir_;
  std::unique_ptr<serve::Server> server_;
  std::uint16_t port_ = 0;
};

TEST_F(ServeApprovals, AllowReleasesTheRequestAndOnlyApproversSeeOrAnswer) {
  REQUIRE_SANDBOX();
  start();
  auto run = streamRun("gate", "/first");
  json ap = run.until("approval")["approval"];
  ASSERT_TRUE(ap.contains("id")) << "no approval line";
  EXPECT_EQ(ap["host"], "127.0.0.1");
  EXPECT_EQ(ap["port"], up_.port());
  EXPECT_EQ(ap["rule"], "loopback-gate");
  EXPECT_EQ(ap["method"], "GET");
  EXPECT_EQ(ap["path"], "/first");
  EXPECT_EQ(ap["workflow"], "gate");
  EXPECT_EQ(ap["caller"], "uid:" + std::to_string(::getuid()));
  EXPECT_EQ(ap["covers"]["once"], "this GET request only");
  EXPECT_EQ(ap["covers"]["execution"], "GET requests to 127.0.0.1:" + std::to_string(up_.port()) +
                                           " matched by rule loopback-gate, any path, until the "
                                           "execution ends");
  const std::string id = ap["id"];
  EXPECT_FALSE(up_.saw("/first"));  // held

  // Approvers list it (root over the socket, the approver token); others get 403.
  auto list = call("GET", "/v1/approvals");
  ASSERT_EQ(list.status, 200) << list.body;
  ASSERT_EQ(list.js().size(), 1u) << list.body;
  EXPECT_EQ(list.js()[0]["id"], id);
  EXPECT_EQ(list.js()[0]["execution_id"], ap["execution_id"]);
  for (const auto& a : list.js()) expectSchema("Approval", a);
  EXPECT_EQ(callTcp(kAgentB, "GET", "/v1/approvals").js(), list.js());
  expectError(callTcp(kAgentA, "GET", "/v1/approvals"), 403, "forbidden");
  expectError(callTcp(kAgentA, "POST", "/v1/approvals/" + id, R"({"decision":"allow"})"), 403,
              "forbidden");
  // Bad bodies and unknown ids change nothing.
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"yes"})"), 400, "bad_request");
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"allow","scope":"forever"})"), 400,
              "bad_request");
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"allow","scope":3})"), 400,
              "bad_request");
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"allow","who":"me"})"), 400,
              "bad_request");
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"allow",)"), 400, "invalid_json");
  // A key named twice is refused, whichever value comes last.
  for (const char* twice : {R"({"decision":"deny","decision":"allow"})",
                            R"({"decision":"allow","scope":"once","scope":"execution"})",
                            R"({"decision":"allow","decisio\u006e":"allow"})"}) {
    SCOPED_TRACE(twice);
    auto r = call("POST", "/v1/approvals/" + id, twice);
    expectError(r, 400, "invalid_json");
    EXPECT_NE(r.js().value("detail", "").find("duplicate key"), std::string::npos) << r.body;
  }
  EXPECT_EQ(call("POST", "/v1/approvals/" + id, R"({"decision":"deny","decision":"allow"})")
                .js()
                .value("detail", ""),
            "line 1, column 20: duplicate key \"decision\" (an object may name a key once)");
  expectError(call("POST", "/v1/approvals/ap-0000000000000000", R"({"decision":"allow"})"), 404,
              "not_found");
  EXPECT_EQ(call("GET", "/v1/approvals").js().size(), 1u);
  EXPECT_FALSE(up_.saw("/first"));

  // The approver token allows it: the answer names the approver, the program gets the page.
  auto ok = callTcp(kAgentB, "POST", "/v1/approvals/" + id, R"({"decision":"allow"})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  expectSchema("Approval", ok.js());
  EXPECT_EQ(ok.js()["decision"], "allow");
  EXPECT_EQ(ok.js()["scope"], "once");
  EXPECT_EQ(ok.js()["decided_by"], "agent-b");
  // Answering again: 409, whoever asks.
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"deny"})"), 409, "conflict");
  expectError(callTcp(kAgentB, "POST", "/v1/approvals/" + id, R"({"decision":"allow"})"), 409,
              "conflict");
  json receipt = run.until("receipt");
  ASSERT_TRUE(receipt.contains("receipt"));
  EXPECT_NE(stdoutOf(receipt).find("code=200 reason= body=upstream-ok /first"), std::string::npos)
      << stdoutOf(receipt);
  EXPECT_TRUE(up_.saw("/first"));
  EXPECT_EQ(call("GET", "/v1/approvals").js(), json::array());

  // The audit row: who asked (the run's caller), who answered, the scope. Rows are written
  // behind the answer: drain flushes them.
  const std::string exec = ap["execution_id"];
  server_->drain();
  server_.reset();
  EXPECT_EQ(count("SELECT count(*) FROM approvals WHERE id = '" + id + "' AND execution_id = '" +
                  exec + "' AND caller = 'uid:" + std::to_string(::getuid()) +
                  "' AND decided_by = 'agent-b' AND decision = 'allow' AND scope = 'once' AND "
                  "rule_id = 'loopback-gate' AND method = 'GET' AND path = '/first' AND workflow "
                  "= 'gate'"),
            1);
  auto [vrc, v] = shellOutput(std::string(SLUICE_BINARY) + " audit verify --db " + db());
  EXPECT_EQ(vrc, 0) << v;
  auto [qrc, q] = shellOutput(std::string(SLUICE_BINARY) + " audit query --db " + db() +
                              " --kind approvals --format json");
  EXPECT_EQ(qrc, 0) << q;
  EXPECT_NE(q.find(id), std::string::npos) << q;
}

TEST_F(ServeApprovals, DenyGivesTheProgramA403AndTheUpstreamNothing) {
  REQUIRE_SANDBOX();
  start();
  auto run = streamRun("gate", "/denied");
  json ap = run.until("approval")["approval"];
  ASSERT_TRUE(ap.contains("id"));
  const std::string id = ap["id"];
  // `sluice approvals list --json` over the socket shows it; `deny` answers it.
  auto [lrc, lout] = cli("list --connect unix:" + socket() + " --json");
  ASSERT_EQ(lrc, 0) << lout;
  auto listed = json::parse(lout, nullptr, false);
  ASSERT_TRUE(listed.is_array()) << lout;
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["id"], id);
  auto [trc, tout] = cli("list --connect unix:" + socket());  // the table names it too
  EXPECT_EQ(trc, 0) << tout;
  EXPECT_NE(tout.find(id), std::string::npos) << tout;
  auto [drc, dout] = cli("deny " + id + " --connect unix:" + socket());
  EXPECT_EQ(drc, 0) << dout;
  json receipt = run.until("receipt");
  ASSERT_TRUE(receipt.contains("receipt"));
  EXPECT_NE(stdoutOf(receipt).find("code=403 reason=approval_denied"), std::string::npos)
      << stdoutOf(receipt);
  EXPECT_FALSE(up_.saw("/denied"));
  bool named = false;
  for (const auto& d : receipt["receipt"]["network"]["denials"])
    named = named || (d["reason"] == "approval_denied" && d["rule"] == "loopback-gate");
  EXPECT_TRUE(named) << receipt["receipt"]["network"].dump();
  expectSchema("Receipt", receipt["receipt"]);
  // Denying again: the CLI reports the server's 409 and exits 1.
  auto [again, aout] = cli("deny " + id + " --connect unix:" + socket());
  EXPECT_EQ(again, 1) << aout;
  EXPECT_NE(aout.find("no longer pending"), std::string::npos) << aout;
  server_->drain();
  server_.reset();
  EXPECT_EQ(count("SELECT count(*) FROM approvals WHERE id = '" + id +
                  "' AND decision = 'deny' AND reason = 'approval_denied' AND decided_by = 'uid:" +
                  std::to_string(::getuid()) + "'"),
            1);
}

TEST_F(ServeApprovals, TheCliOverTcpWithAnApproverTokenAndWithout) {
  REQUIRE_SANDBOX();
  start();
  auto run = streamRun("gate", "/over-tcp");
  json ap = run.until("approval")["approval"];
  ASSERT_TRUE(ap.contains("id"));
  const std::string id = ap["id"];
  const std::string url = "http://127.0.0.1:" + std::to_string(port_);
  // A token that is not an approver: exit 1 with the server's 403.
  auto [nrc, nout] = cli("list --connect " + url + " --token " + kAgentA);
  EXPECT_EQ(nrc, 1) << nout;
  EXPECT_NE(nout.find("may not see or answer approvals"), std::string::npos) << nout;
  auto [narc, naout] = cli("allow " + id + " --connect " + url + " --token " + kAgentA);
  EXPECT_EQ(narc, 1) << naout;
  EXPECT_FALSE(up_.saw("/over-tcp"));
  // No token at all: refused before any request (exit 2). The approver token (from
  // $SLUICE_TOKEN) allows it for the rest of the execution.
  auto [urc, uout] = shellOutput("env -u SLUICE_TOKEN " + std::string(SLUICE_BINARY) +
                                 " approvals list --connect " + url);
  EXPECT_EQ(urc, 2) << uout;
  EXPECT_NE(uout.find("needs a token"), std::string::npos) << uout;
  auto [arc, aout] =
      shellOutput("SLUICE_TOKEN=" + std::string(kAgentB) + " " + SLUICE_BINARY +
                  " approvals allow " + id + " --scope execution --json --connect " + url);
  ASSERT_EQ(arc, 0) << aout;
  auto answered = json::parse(aout, nullptr, false);
  ASSERT_TRUE(answered.is_object()) << aout;
  EXPECT_EQ(answered["decided_by"], "agent-b");
  EXPECT_EQ(answered["scope"], "execution");
  json receipt = run.until("receipt");
  EXPECT_NE(stdoutOf(receipt).find("code=200"), std::string::npos) << stdoutOf(receipt);
  EXPECT_TRUE(up_.saw("/over-tcp"));
  // Unreachable server: exit 2.
  auto [xrc, xout] = cli("list --connect unix:" + (dir_ / "nothing.sock").string());
  EXPECT_EQ(xrc, 2) << xout;
  server_->drain();
  server_.reset();
  EXPECT_EQ(count("SELECT count(*) FROM approvals WHERE id = '" + id +
                  "' AND decision = 'allow' AND scope = 'execution' AND decided_by = 'agent-b'"),
            1);
}

// Over the Unix socket the caller is the connecting uid: root and the uids given with
// --approver-uid are approvers, any other uid gets 403 (the socket is opened to everyone here
// so that the check under test is the approver check, not the file mode).
TEST_F(ServeApprovals, UnixCallersAreApproversOnlyWhenListed) {
  if (::geteuid() != 0) {
    if (isolationRequired()) FAIL() << "needs root to call as other uids";
    GTEST_SKIP() << "needs root to call as other uids";
  }
  auto as = [&](unsigned uid, const std::string& method, const std::string& body) {
    ::chmod(socket().c_str(), 0666);
    const std::string data =
        body.empty() ? "" : " -H 'Content-Type: application/json' -d '" + body + "'";
    auto [rc, out] =
        shellOutput("setpriv --reuid=" + std::to_string(uid) + " --regid=" + std::to_string(uid) +
                    " --clear-groups curl -s -o /dev/null -w "
                    "'%{http_code}' -X " +
                    method + data + " --unix-socket " + socket() + " http://sluice/v1/approvals" +
                    (method == "POST" ? "/ap-0000000000000000" : ""));
    return out;
  };
  start();
  EXPECT_EQ(as(65534, "GET", ""), "403");
  EXPECT_EQ(as(65534, "POST", R"({"decision":"allow"})"), "403");
  server_->drain();
  server_.reset();
  start({65534});
  EXPECT_EQ(as(65534, "GET", ""), "200");
  EXPECT_EQ(as(65534, "POST", R"({"decision":"allow"})"), "404");  // may answer; none pending
  EXPECT_EQ(as(65533, "GET", ""), "403");
}

TEST_F(ServeApprovals, AnApprovalWhoseRunEndedIs409) {
  REQUIRE_SANDBOX();
  start();
  // sandbox.timeout 2s, ask.timeout 50s: the run is killed while its approval waits.
  auto run = streamRun("short", "/too-late");
  json ap = run.until("approval")["approval"];
  ASSERT_TRUE(ap.contains("id"));
  const std::string id = ap["id"];
  json receipt = run.until("receipt");
  ASSERT_TRUE(receipt.contains("receipt"));
  EXPECT_EQ(receipt["receipt"]["limit_hit"], "timeout") << receipt.dump();
  expectError(call("POST", "/v1/approvals/" + id, R"({"decision":"allow"})"), 409, "conflict");
  EXPECT_EQ(call("GET", "/v1/approvals").js(), json::array());
  EXPECT_FALSE(up_.saw("/too-late"));
  server_->drain();
  server_.reset();
  // Withdrawn either way, by whichever comes first: killing the sandbox closes curl's socket,
  // which withdraws the approval as closed (a client that hangs up), and the run's end withdraws
  // what is still pending as execution_ended. Both are true of this approval; the 409 above is
  // the point of the test.
  EXPECT_EQ(count("SELECT count(*) FROM approvals WHERE id = '" + id +
                  "' AND decision = 'deny' AND reason IN ('closed', 'execution_ended')"),
            1);
}

// End to end: `allow --scope execution` on a GET does not let the program's
// POST through; `sluice approvals allow --scope host` on the POST covers its DELETE; the rows
// name the grant that decided each.
TEST_F(ServeApprovals, AnExecutionGrantKeepsItsMethodAndScopeHostWidensIt) {
  REQUIRE_SANDBOX();
  start();
  Stream run{Http::unix(socket()), {}};
  const std::string url = "http://127.0.0.1:" + std::to_string(up_.port());
  const json body = {
      {"workflow", "gate"},
      {"argv",
       {"/bin/sh", "-c",
        "for m in GET POST DELETE; do c=$(curl -s --max-time 55 -o /dev/null -w '%{http_code}' "
        "-X $m " +
            url + "/m-$m); printf '%s=%s ' $m $c; done"}}};
  run.h.send("POST", "/v1/runs", body.dump(), "Accept: application/x-ndjson\r\n");
  ASSERT_EQ(run.h.readHead().status, 200);
  json g = run.until("approval")["approval"];
  ASSERT_EQ(g.value("method", ""), "GET") << g.dump();
  auto ok = call("POST", "/v1/approvals/" + g["id"].get<std::string>(),
                 R"({"decision":"allow","scope":"execution"})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.js()["scope"], "execution");
  // The POST is asked again, though the GET's grant names the same rule, host and port.
  json p = run.until("approval")["approval"];
  ASSERT_EQ(p.value("method", ""), "POST") << p.dump();
  EXPECT_FALSE(up_.saw("/m-POST"));
  auto [arc, aout] =
      cli("allow " + p["id"].get<std::string>() + " --scope host --connect unix:" + socket());
  ASSERT_EQ(arc, 0) << aout;
  EXPECT_NE(aout.find("scope host: requests of every method to 127.0.0.1:"), std::string::npos)
      << aout;
  json receipt = run.until("receipt");
  EXPECT_NE(stdoutOf(receipt).find("GET=200 POST=200 DELETE=200"), std::string::npos)
      << stdoutOf(receipt);
  long asked = 0;
  for (const auto& e : run.events) asked += e["type"] == "approval";
  EXPECT_EQ(asked, 2) << "the DELETE was asked although scope host covered it";
  server_->drain();
  server_.reset();
  const std::string me = "uid:" + std::to_string(::getuid());
  auto rowIs = [&](const char* method, const char* scope, const std::string& by) {
    return count(std::string("SELECT count(*) FROM approvals WHERE method = '") + method +
                 "' AND decision = 'allow' AND scope = '" + scope + "' AND decided_by = '" + by +
                 "'");
  };
  EXPECT_EQ(rowIs("GET", "execution", me), 1);
  EXPECT_EQ(rowIs("POST", "host", me), 1);
  EXPECT_EQ(
      rowIs("DELETE", "host", "scope:host of " + p["id"].get<std::string>() + " (" + me + ")"), 1);
}

// A hostile program's very long path: `sluice approvals list` shows it cut with "..." (every
// line bounded, so the terminal never wraps it) and says what each scope covers; --json has it
// whole.
TEST_F(ServeApprovals, TheListCutsALongPathAndJsonKeepsItWhole) {
  REQUIRE_SANDBOX();
  start();
  const std::string path = "/long/" + std::string(3000, 'A') + "/end";
  auto run = streamRun("gate", path);
  json ap = run.until("approval")["approval"];
  ASSERT_TRUE(ap.contains("id"));
  EXPECT_EQ(ap["path"], path);
  auto [rc, out] = cli("list --connect unix:" + socket());
  ASSERT_EQ(rc, 0) << out;
  std::size_t longest = 0, lines = 0;
  for (std::size_t at = 0; at < out.size();) {
    std::size_t nl = out.find('\n', at);
    if (nl == std::string::npos) nl = out.size();
    longest = std::max(longest, nl - at);
    ++lines;
    at = nl + 1;
  }
  EXPECT_LE(longest, 200u) << out;
  EXPECT_EQ(lines, 6u) << "three lines and one per scope:\n" << out;
  EXPECT_NE(out.find("/long/AAAA"), std::string::npos) << out;
  EXPECT_NE(out.find("..."), std::string::npos) << out;
  EXPECT_EQ(out.find("/end"), std::string::npos) << "the path was not cut";
  EXPECT_NE(out.find("--scope host      requests of every method to 127.0.0.1:"), std::string::npos)
      << out;
  auto [jrc, jout] = cli("list --json --connect unix:" + socket());
  ASSERT_EQ(jrc, 0) << jout;
  auto listed = json::parse(jout, nullptr, false);
  ASSERT_TRUE(listed.is_array() && listed.size() == 1u) << jout.substr(0, 200);
  EXPECT_EQ(listed[0]["path"], path);
  EXPECT_EQ(cli("deny " + ap["id"].get<std::string>() + " --connect unix:" + socket()).first, 0);
  run.until("receipt");
}

// Every JSON body the API accepts refuses a key named twice, before acting on it (no sandbox
// needed: nothing is run).
TEST_F(ServeApprovals, EveryJsonBodyRefusesADuplicateKey) {
  start();
  for (const auto& [target, twice] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/approvals/ap-0000000000000000", R"({"decision":"deny","decision":"allow"})"},
           {"/v1/runs", R"({"workflow":"gate","argv":["true"],"workflow":"short"})"},
           {"/v1/sessions", R"({"workflow":"gate","ttl":"1m","ttl":"2m"})"},
           {"/v1/runs", R"({"workflow":"gate","argv":["true"],"limits":{"pids":5,"pids":50}})"}}) {
    SCOPED_TRACE(target + " " + twice);
    auto r = call("POST", target, twice);
    expectError(r, 400, "invalid_json");
    EXPECT_NE(r.js().value("detail", "").find("duplicate key"), std::string::npos) << r.body;
  }
}

// `sluice approvals list` never hands the terminal a control byte of what it shows (ESC, CR,
// a newline in a path) and refuses an answer that names a key twice.
TEST_F(ServeApprovals, TheListEscapesControlBytesAndRefusesDuplicateKeys) {
  const std::string sock = (dir_ / "canned.sock").string();
  json a = {{"id", "ap-0123456789abcdef"},
            {"execution_id", "ex-1"},
            {"session_id", nullptr},
            {"workflow", "gate"},
            {"caller", "uid:0"},
            {"rule", "loopback-gate"},
            {"host", "evil.example\x1b]0;owned\x07"},
            {"port", 80},
            {"method", "GET"},
            {"path", "/x\x1b[2J\x1b[1;1H\rallow everything\nfake line"},
            {"asked_at", "2026-11-26T00:00:00.000Z"},
            {"expires_at", "2026-11-26T00:01:00.000Z"},
            {"covers",
             {{"once", "this GET request only"},
              {"execution", "GET \x1b[31mrequests"},
              {"host", "every method"}}}};
  {
    CannedServer server(sock, json::array({a}).dump());
    auto [rc, out] = cli("list --connect unix:" + sock);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << "an ESC reached the terminal";
    EXPECT_EQ(out.find('\r'), std::string::npos) << "a CR reached the terminal";
    EXPECT_EQ(out.find('\x07'), std::string::npos) << "a BEL reached the terminal";
    EXPECT_NE(out.find(R"(/x\x1b[2J\x1b[1;1H\x0dallow everything\x0afake line)"), std::string::npos)
        << out;
    EXPECT_NE(out.find(R"(evil.example\x1b]0;owned\x07:80)"), std::string::npos) << out;
    EXPECT_NE(out.find(R"(GET \x1b[31mrequests)"), std::string::npos) << out;
    // On a terminal (a pty 70 columns wide), every line is cut to its width: nothing wraps.
    auto [trc, tout] = shellOutput("script -qec 'stty cols 70; " + std::string(SLUICE_BINARY) +
                                   " approvals list --connect unix:" + sock + "' /dev/null");
    EXPECT_EQ(trc, 0) << tout;
    std::size_t lines = 0;
    for (std::size_t at = 0, nl; at < tout.size(); at = nl + 1) {
      nl = tout.find('\n', at);
      if (nl == std::string::npos) nl = tout.size();
      std::string line = tout.substr(at, nl - at);
      if (!line.empty() && line.back() == '\r') line.pop_back();  // the pty's CR LF
      EXPECT_LE(line.size(), 70u) << line;
      lines += !line.empty();
    }
    EXPECT_EQ(lines, 6u) << tout;
    EXPECT_NE(tout.find("..."), std::string::npos) << tout;
    // --json: whole, with JSON's own escapes (still no raw control byte).
    auto [jrc, jout] = cli("list --json --connect unix:" + sock);
    EXPECT_EQ(jrc, 0) << jout;
    EXPECT_EQ(jout.find('\x1b'), std::string::npos);
    EXPECT_EQ(json::parse(jout, nullptr, false), json::array({a}));
  }
  {
    CannedServer server(sock, R"({"decision":"deny","scope":"once","decision":"allow"})");
    auto [rc, out] = cli("allow ap-0123456789abcdef --connect unix:" + sock);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("duplicate key \"decision\""), std::string::npos) << out;
  }
}

}  // namespace
