// `sluice serve`'s API. Most tests drive it in-process (api_harness.hpp: Engine, sessions, pool
// and Api as the daemon wires them, requests handed to Api::handle()): callers, every endpoint,
// errors as {"error","reason","detail"}, NDJSON streaming, sessions, the warm pool, metrics,
// and responses validated against schemas/api.v1.yaml (tests/schemas/check_api.py). The rest
// go through serve::Server over its Unix socket and token-authenticated TCP listener (what only
// the transport shows: the socket's mode, tokens, body limits, a client that goes away, drain,
// curl and the Python client), or run the real `sluice serve` process (signals, zygote).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "api_harness.hpp"
#include "canned_server.hpp"
#include "isolation.hpp"
#include "proc_scan.hpp"
#include "serve_client.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/serve/server.hpp"

namespace fs = std::filesystem;
namespace serve = sluice::serve;
using nlohmann::json;

namespace {

// The daemons take their sandboxes from a zygote, as `sluice serve` does; it is forked during
// static initialisation, while this process is still single-threaded.
const std::shared_ptr<sluice::runner::SandboxZygote> g_zygote = [] {
  auto z = sluice::runner::SandboxZygote::start();
  return z ? std::shared_ptr<sluice::runner::SandboxZygote>(std::move(*z)) : nullptr;
}();

using serve_test::ApiHarness;
using serve_test::expectSchema;
using serve_test::Http;
using serve_test::Response;

constexpr const char* kTokenA = "aaaaaaaaaaaaaaaaaaaaaaaa";  // agent-a
constexpr const char* kTokenB = "bbbbbbbbbbbbbbbbbbbbbbbb";  // agent-b, an approver

// The policy directory, token file and options every test starts from.
class ServeFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = serve_test::freshTestDir("sluice-serve");
    std::ofstream(dir_ / "policies" / "shell.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: shell\ndescription: plain shell\n"
           "sandbox:\n  timeout: 120s\n  memory: 256MiB\n  network: none\n";
    std::ofstream(dir_ / "policies" / "web.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: web\ndescription: one host\n"
           "sandbox:\n  timeout: 20s\n  network: proxy\negress:\n  rules:\n"
           "    - {id: only-example, action: allow, hosts: [allowed.example], ports: [443]}\n";
    serve_test::writeTokenFile(
        dir_, std::string("agent-a ") + kTokenA + "\nagent-b " + kTokenB + " approver\n");
  }

  serve::ServeOptions options() {
    serve::ServeOptions o;
    o.policy_dir = (dir_ / "policies").string();
    o.listens = {"unix:" + socket(), "127.0.0.1:0"};
    o.audit_db = (dir_ / "audit.db").string();
    o.token_file = (dir_ / "tokens").string();
    o.drain = std::chrono::milliseconds(1500);
    o.zygote = g_zygote;
    return o;
  }
  std::string socket() const { return (dir_ / "sluice.sock").string(); }
  void expectError(const Response& r, int status, const std::string& reason) {
    EXPECT_EQ(r.status, status) << r.body;
    auto j = r.js();
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["reason"], reason) << r.body;
    EXPECT_TRUE(j["error"].is_string());
    expectSchema("Error", j);
  }

  fs::path dir_;
};

// The API in-process: call() as a Unix-socket client of this uid, callTcp() as the token's
// caller.
class ServeTest : public ServeFixture {
 protected:
  void TearDown() override {
    api_.reset();  // drains
    fs::remove_all(dir_);
  }
  void start(serve::ServeOptions o) {
    auto h = ApiHarness::create(std::move(o));
    ASSERT_TRUE(h.has_value()) << h.error();
    api_ = std::move(*h);
  }
  void start() { start(options()); }
  std::expected<void, std::string> reload() { return api_->reload(); }
  Response call(const std::string& method, const std::string& target, const std::string& body = "",
                const std::string& accept = "") {
    return api_->call(ApiHarness::unixCaller(), method, target, body, accept);
  }
  Response callTcp(const std::string& token, const std::string& method, const std::string& target,
                   const std::string& body = "") {
    return api_->call(api_->tokenCaller(token), method, target, body);
  }

  std::unique_ptr<ApiHarness> api_;
};

// serve::Server over its Unix socket and TCP listener.
class ServeSocketTest : public ServeFixture {
 protected:
  void TearDown() override {
    if (server_) server_->drain();
    server_.reset();
    fs::remove_all(dir_);
  }
  void start(serve::ServeOptions o) {
    auto s = serve::Server::create(std::move(o));
    ASSERT_TRUE(s.has_value()) << s.error();
    server_ = std::move(*s);
    auto r = server_->start();
    ASSERT_TRUE(r.has_value()) << r.error();
    for (const auto& e : server_->endpoints())
      if (!e.starts_with("unix:"))
        port_ = static_cast<std::uint16_t>(std::stoi(e.substr(e.rfind(':') + 1)));
  }
  void start() { start(options()); }
  Response call(const std::string& method, const std::string& target, const std::string& body = "",
                const std::string& extra = "") {
    auto h = Http::unix(socket());
    EXPECT_TRUE(h.ok());
    h.send(method, target, body, extra);
    return h.read();
  }
  Response callTcp(const std::string& token, const std::string& method, const std::string& target,
                   const std::string& body = "") {
    auto h = Http::tcp(port_);
    EXPECT_TRUE(h.ok());
    h.send(method, target, body, token.empty() ? "" : "Authorization: Bearer " + token + "\r\n");
    return h.read();
  }

  std::unique_ptr<serve::Server> server_;
  std::uint16_t port_ = 0;
};

// ---- Over the sockets -------------------------------------------------------------------------

// The daemon end to end over both listeners: a run over the Unix socket, a session with a
// file over TCP with a token, each recorded under its caller.
TEST_F(ServeSocketTest, ARunAndASessionOverTheSocketAndTcp) {
  REQUIRE_SANDBOX();
  start();
  auto run = call("POST", "/v1/runs", R"({"workflow":"shell","argv":["/bin/sh","-c","echo hi"]})");
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(run.js()["stdout"]["text"], "hi\n");
  EXPECT_EQ(run.js()["caller"], "uid:" + std::to_string(::getuid()));
  auto created = callTcp(kTokenA, "POST", "/v1/sessions", R"({"workflow":"shell"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];
  ASSERT_EQ(callTcp(kTokenA, "PUT", "/v1/sessions/" + id + "/files/work/in.txt", "over tcp").status,
            201);
  auto exec = callTcp(kTokenA, "POST", "/v1/sessions/" + id + "/exec",
                      R"({"argv":["/bin/cat","/work/in.txt"]})");
  ASSERT_EQ(exec.status, 200) << exec.body;
  EXPECT_EQ(exec.js()["stdout"]["text"], "over tcp");
  EXPECT_EQ(exec.js()["caller"], "agent-a");
  EXPECT_EQ(callTcp(kTokenA, "DELETE", "/v1/sessions/" + id).status, 200);
  expectError(callTcp("", "POST", "/v1/sessions", R"({"workflow":"shell"})"), 401, "unauthorized");
}

// `sluice session policy` as a user runs it: over the Unix socket (this uid) and over TCP with a
// token. Success prints the new generation; an invalid file exits 1 with its FILE:LINE:COL
// diagnostics, the session untouched; widening by a caller that is no approver exits 1 naming
// the widening.
TEST_F(ServeSocketTest, SessionPolicyCommandOverTheSocketAndTcp) {
  REQUIRE_SANDBOX();
  start();
  const std::string head =
      "apiVersion: sluice/v1\nkind: Workflow\nname: web\nsandbox:\n  timeout: 20s\n"
      "  network: proxy\negress:\n  rules:\n";
  auto file = [&](const std::string& name, const std::string& rules) {
    const auto path = dir_ / name;
    std::ofstream(path) << head << rules;
    return path.string();
  };
  const auto narrower =
      file("narrower.yaml", "    - {id: only-example, action: deny, hosts: [allowed.example]}\n");
  const auto wider = file("wider.yaml",
                          "    - {id: only-example, action: allow, hosts: [allowed.example, "
                          "other.example], ports: [443]}\n");
  const auto bad = file("bad.yaml", "    - {id: x, action: allow, hosts: [a.example], bogus: 1}\n");
  auto sessionPolicy = [&](const std::string& id, const std::string& policy,
                           const std::string& via) {
    return sluice::testing::shellOutput(std::string(SLUICE_BINARY) + " session policy " + id +
                                        " --policy " + policy + " " + via);
  };

  auto mine = call("POST", "/v1/sessions", R"({"workflow":"web"})");
  ASSERT_EQ(mine.status, 201) << mine.body;
  const std::string id = mine.js()["id"];
  const std::string unix_via = "--connect unix:" + socket();
  auto [brc, bout] = sessionPolicy(id, bad, unix_via);
  EXPECT_EQ(brc, 1) << bout;
  EXPECT_NE(bout.find(bad + ":9:"), std::string::npos) << bout;
  auto [rc, out] = sessionPolicy(id, narrower, unix_via);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("session " + id + ": policy "), std::string::npos) << out;
  EXPECT_NE(out.find("in force as generation 2"), std::string::npos)
      << out;  // bad.yaml swapped nothing

  auto theirs = callTcp(kTokenA, "POST", "/v1/sessions", R"({"workflow":"web"})");
  ASSERT_EQ(theirs.status, 201) << theirs.body;
  const std::string id_a = theirs.js()["id"];
  const std::string tcp_via =
      "--connect http://127.0.0.1:" + std::to_string(port_) + " --token " + kTokenA;
  auto [wrc, wout] = sessionPolicy(id_a, wider, tcp_via);
  EXPECT_EQ(wrc, 1) << wout;
  EXPECT_NE(wout.find("403"), std::string::npos) << wout;
  EXPECT_NE(wout.find("only an approver may widen"), std::string::npos) << wout;
  EXPECT_NE(wout.find("only-example"), std::string::npos) << wout;
  auto [nrc, nout] = sessionPolicy(id_a, narrower, tcp_via);
  EXPECT_EQ(nrc, 0) << nout;
  EXPECT_NE(nout.find("in force as generation 2"), std::string::npos) << nout;
  EXPECT_EQ(call("DELETE", "/v1/sessions/" + id).status, 200);
  EXPECT_EQ(callTcp(kTokenA, "DELETE", "/v1/sessions/" + id_a).status, 200);
}

// A tampered or hostile daemon's answer is untrusted input to `sluice session policy`: a field of
// the wrong type or a body that is no object is a clear error (it used to throw and abort), and
// what the daemon says reaches the terminal escaped.
TEST_F(ServeSocketTest, SessionPolicyCommandTreatsAMalformedAnswerAsAnError) {
  const auto policy = (dir_ / "web.yaml").string();
  std::ofstream(policy) << "apiVersion: sluice/v1\nkind: Workflow\nname: web\nsandbox:\n"
                           "  network: proxy\negress:\n  rules:\n"
                           "    - {id: a, action: allow, hosts: [a.example]}\n";
  const std::string sock = (dir_ / "canned.sock").string();
  auto sessionPolicy = [&](const std::string& body, int status) {
    sluice::testing::CannedServer server(sock, body, status);
    return sluice::testing::shellOutput(std::string(SLUICE_BINARY) +
                                        " session policy s-1 --policy " + policy +
                                        " --connect unix:" + sock);
  };
  const struct {
    std::string body;
    int status;
    int rc;
    std::string said;
  } cases[] = {
      {R"({"policy_sha256": 7, "generation": 2})", 200, 2, "not a policy update"},
      {R"({"policy_sha256": "ab", "generation": "2"})", 200, 2, "not a policy update"},
      {R"([1, 2])", 200, 2, "not a policy update"},
      {"not json", 200, 2, "not a policy update"},
      {R"({"error": 5})", 403, 1, R"(403 {"error": 5})"},
      {R"({"error": "no\u001b[2J such session"})", 404, 1, "404 no\\x1b[2J such session"},
      {R"({"policy_sha256": "ab", "generation": 3})", 200, 0, "policy ab in force as generation 3"},
  };
  for (const auto& c : cases) {
    auto [rc, out] = sessionPolicy(c.body, c.status);
    EXPECT_EQ(rc, c.rc) << c.body << ": " << out;
    EXPECT_NE(out.find(c.said), std::string::npos) << c.body << ": " << out;
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << c.body << ": " << out;
  }
}

TEST_F(ServeSocketTest, HealthAndWorkflowsOverTheUnixSocket) {
  start();
  auto h = call("GET", "/v1/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.js()["status"], "ok");
  expectSchema("Health", h.js());
  auto w = call("GET", "/v1/workflows");
  ASSERT_EQ(w.status, 200);
  ASSERT_TRUE(w.js().is_array());
  EXPECT_EQ(w.js().size(), 2u);
  for (const auto& item : w.js()) expectSchema("Workflow", item);
  // The socket is owner and group only.
  struct stat st {};
  ASSERT_EQ(::stat(socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(ServeSocketTest, TcpNeedsAValidBearerToken) {
  start();
  expectError(callTcp("", "GET", "/v1/healthz"), 401, "unauthorized");
  expectError(callTcp("aaaaaaaaaaaaaaaaaaaaaaab", "GET", "/v1/healthz"), 401, "unauthorized");
  expectError(callTcp("aaaaaaaaaaaa", "GET", "/v1/healthz"), 401, "unauthorized");
  EXPECT_EQ(callTcp("aaaaaaaaaaaaaaaaaaaaaaaa", "GET", "/v1/healthz").status, 200);
}

TEST_F(ServeSocketTest, NoTcpListenerWithoutATokenFileAndNoLooseTokenFile) {
  auto o = options();
  o.token_file.clear();
  auto s = serve::Server::create(o);
  ASSERT_TRUE(s.has_value()) << s.error();
  auto r = (*s)->start();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("--token-file"), std::string::npos) << r.error();
  (*s)->drain();
  ::chmod((dir_ / "tokens").c_str(), 0644);
  auto loose = serve::Server::create(options());
  ASSERT_FALSE(loose.has_value());
  EXPECT_NE(loose.error().find("chmod 600"), std::string::npos) << loose.error();
}

// A workflow that needs a secret the store lacks is refused, at start and on reload (by the
// secret's name; there is no value to show).
TEST_F(ServeTest, AWorkflowWhoseSecretIsMissingIsRefused) {
  start();
  const std::string needs =
      "apiVersion: sluice/v1\nkind: Workflow\nname: api\negress:\n  rules:\n"
      "    - id: a\n      action: allow\n      hosts: [api.example]\n"
      "      allow_plaintext_credentials: true\n"
      "      inject:\n        headers:\n          Authorization: \"Bearer ${secret:api_token}\"\n";
  std::ofstream(dir_ / "policies" / "api.yaml") << needs;
  auto reloaded = reload();
  ASSERT_FALSE(reloaded.has_value());
  EXPECT_NE(reloaded.error().find("api_token"), std::string::npos) << reloaded.error();
  EXPECT_EQ(call("GET", "/v1/workflows").js().size(), 2u);  // the policy in force stays
  api_.reset();
  auto fresh = ApiHarness::create(options());
  ASSERT_FALSE(fresh.has_value());
  EXPECT_NE(fresh.error().find("api_token"), std::string::npos) << fresh.error();
}

TEST_F(ServeTest, BadRequestsGetErrorsThatSayWhatAndWhere) {
  start();
  auto bad = call("POST", "/v1/runs", "{\"workflow\": \"shell\",\n \"argv\": [\"true\",]}");
  expectError(bad, 400, "invalid_json");
  EXPECT_NE(bad.js()["detail"].get<std::string>().find("line 2, column"), std::string::npos)
      << bad.body;
  expectError(call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"],"argz":1})"), 400,
              "bad_request");
  expectError(call("POST", "/v1/runs", R"({"workflow":"nope","argv":["true"]})"), 404, "not_found");
  expectError(call("POST", "/v1/runs", R"({"workflow":"shell","argv":[]})"), 400, "bad_request");
  expectError(call("GET", "/v1/nothing"), 404, "not_found");
  expectError(call("GET", "/v1/executions/ex-0000"), 404, "not_found");
}

// Approvals (answered once `action: ask` exists): only approvers see the list or may answer.
TEST_F(ServeTest, OnlyApproversSeeApprovals) {
  start();
  expectError(callTcp("aaaaaaaaaaaaaaaaaaaaaaaa", "GET", "/v1/approvals"), 403, "forbidden");
  expectError(
      callTcp("aaaaaaaaaaaaaaaaaaaaaaaa", "POST", "/v1/approvals/ap-1", R"({"decision":"allow"})"),
      403, "forbidden");
  auto list = callTcp("bbbbbbbbbbbbbbbbbbbbbbbb", "GET", "/v1/approvals");
  EXPECT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(list.js(), json::array());
  expectError(
      callTcp("bbbbbbbbbbbbbbbbbbbbbbbb", "POST", "/v1/approvals/ap-1", R"({"decision":"maybe"})"),
      400, "bad_request");
  expectError(callTcp("bbbbbbbbbbbbbbbbbbbbbbbb", "POST", "/v1/approvals/ap-1",
                      R"({"decision":"allow","scope":"once"})"),
              404, "not_found");
  // Root over the Unix socket is an approver.
  EXPECT_EQ(call("GET", "/v1/approvals").status, ::getuid() == 0 ? 200 : 403);
}

// A session's policy updated live: validated first (400 with FILE:LINE:COL, the old policy
// kept), only narrowed by a caller that is not an approver (403 widening_not_allowed), widened
// by an approver; each update is the session's next generation, listed by the next receipt.
TEST_F(ServeTest, ASessionsPolicyIsUpdatedLiveAndOnlyApproversWiden) {
  REQUIRE_SANDBOX();
  start();
  const std::string head =
      "apiVersion: sluice/v1\nkind: Workflow\nname: web\nsandbox:\n  timeout: 20s\n"
      "  network: proxy\negress:\n  rules:\n";
  const std::string wider = head +
                            "    - {id: only-example, action: allow, hosts: [allowed.example, "
                            "other.example], ports: [443]}\n";
  const std::string narrower =
      head + "    - {id: only-example, action: deny, hosts: [allowed.example], ports: [443]}\n";
  auto put = [&](const char* token, const std::string& id, const std::string& yaml) {
    return callTcp(token, "PUT", "/v1/sessions/" + id + "/policy", json{{"policy", yaml}}.dump());
  };
  auto created = callTcp(kTokenA, "POST", "/v1/sessions", R"({"workflow":"web"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];

  auto bad =
      put(kTokenA, id, head + "    - {id: x, action: allow, hosts: [a.example], bogus: 1}\n");
  expectError(bad, 400, "bad_request");
  EXPECT_NE(bad.js()["error"].get<std::string>().find("policy.yaml:9:"), std::string::npos)
      << bad.body;
  expectError(put(kTokenA, id, "apiVersion: sluice/v1\nkind: Workflow\nname: shell\n"), 400,
              "bad_request");
  auto wide = put(kTokenA, id, wider);
  expectError(wide, 403, "widening_not_allowed");
  EXPECT_NE(wide.js()["error"].get<std::string>().find("only-example"), std::string::npos);
  expectError(put(kTokenB, id, narrower), 404, "not_found");  // another caller's session

  auto narrowed = put(kTokenA, id, narrower);
  ASSERT_EQ(narrowed.status, 200) << narrowed.body;
  expectSchema("PolicyUpdated", narrowed.js());
  EXPECT_EQ(narrowed.js()["generation"], 2);  // the refused ones swapped nothing
  auto exec = callTcp(kTokenA, "POST", "/v1/sessions/" + id + "/exec", R"({"argv":["true"]})");
  ASSERT_EQ(exec.status, 200) << exec.body;
  expectSchema("Receipt", exec.js());
  ASSERT_TRUE(exec.js().contains("policy_generations")) << exec.body;
  EXPECT_EQ(exec.js()["policy_generations"].back()["generation"], 2);
  EXPECT_EQ(callTcp(kTokenA, "DELETE", "/v1/sessions/" + id).status, 200);

  // An approver may widen its own session's policy.
  auto theirs = callTcp(kTokenB, "POST", "/v1/sessions", R"({"workflow":"web"})");
  ASSERT_EQ(theirs.status, 201) << theirs.body;
  const std::string id_b = theirs.js()["id"];
  auto widened = put(kTokenB, id_b, wider);
  ASSERT_EQ(widened.status, 200) << widened.body;
  EXPECT_EQ(widened.js()["generation"], 2);
  EXPECT_EQ(callTcp(kTokenB, "DELETE", "/v1/sessions/" + id_b).status, 200);
}

TEST_F(ServeSocketTest, OversizedBodyIs413) {
  auto o = options();
  o.max_body_bytes = 1024;
  start(o);
  std::string big =
      R"({"workflow":"shell","argv":["true"],"stdin":")" + std::string(4096, 'x') + "\"}";
  expectError(call("POST", "/v1/runs", big), 413, "payload_too_large");
}

TEST_F(ServeTest, RunReturnsAReceiptOwnedByItsCaller) {
  REQUIRE_SANDBOX();
  start();
  auto r = call("POST", "/v1/runs",
                R"({"workflow":"shell","argv":["/bin/sh","-c","cat; echo; cat /work/a.txt"],)"
                R"("stdin":"from stdin","files":{"/work/a.txt":"ZnJvbSBhIGZpbGU="},)"
                R"("limits":{"timeout":"10s"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto receipt = r.js();
  EXPECT_EQ(receipt["stdout"]["text"], "from stdin\nfrom a file") << r.body;
  EXPECT_EQ(receipt["caller"], "uid:" + std::to_string(::getuid()));
  EXPECT_EQ(receipt["exit"]["code"], 0);
  EXPECT_TRUE(receipt["hash"].is_string());
  expectSchema("Receipt", receipt);
  const std::string id = receipt["execution_id"];
  // The owner reads it back; another caller (a TCP token) gets 404.
  auto mine = call("GET", "/v1/executions/" + id);
  ASSERT_EQ(mine.status, 200) << mine.body;
  EXPECT_EQ(mine.js()["execution_id"], id);
  EXPECT_EQ(mine.js()["hash"], receipt["hash"]);
  expectError(callTcp("aaaaaaaaaaaaaaaaaaaaaaaa", "GET", "/v1/executions/" + id), 404, "not_found");
  // A TCP caller's run is recorded under its token's name.
  auto theirs = callTcp("aaaaaaaaaaaaaaaaaaaaaaaa", "POST", "/v1/runs",
                        R"({"workflow":"shell","argv":["true"]})");
  ASSERT_EQ(theirs.status, 200) << theirs.body;
  EXPECT_EQ(theirs.js()["caller"], "agent-a");
  // Limits may only tighten.
  expectError(call("POST", "/v1/runs",
                   R"({"workflow":"shell","argv":["true"],"limits":{"memory":"4GiB"}})"),
              400, "bad_request");
}

// `rule` is null when no rule decided, in a session's summary as in receipts and streams.
TEST_F(ServeTest, ASessionSummarysDenialWithoutARuleNamesNone) {
  REQUIRE_SANDBOX();
  start();
  auto created = call("POST", "/v1/sessions", R"({"workflow":"web"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];
  auto exec =
      call("POST", "/v1/sessions/" + id + "/exec",
           R"({"argv":["/bin/sh","-c","curl -s -o /dev/null https://denied.example/; true"]})");
  ASSERT_EQ(exec.status, 200) << exec.body;
  auto ended = call("DELETE", "/v1/sessions/" + id);
  ASSERT_EQ(ended.status, 200) << ended.body;
  const json summary = ended.js();
  expectSchema("SessionSummary", summary);
  const json& denials = summary["network"]["denials"];
  ASSERT_EQ(denials.size(), 1u) << ended.body;
  EXPECT_EQ(denials[0]["host"], "denied.example");
  EXPECT_TRUE(denials[0]["rule"].is_null()) << denials[0].dump();
}

TEST_F(ServeTest, NdjsonStreamsOutputAndNetworkThenTheReceipt) {
  REQUIRE_SANDBOX();
  start();
  auto r = call(
      "POST", "/v1/runs",
      R"({"workflow":"web","argv":["/bin/sh","-c","echo one; curl -s -o /dev/null https://denied.example/ ; echo two >&2"]})",
      "application/x-ndjson");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "application/x-ndjson");
  std::vector<json> events;
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);) {
    events.push_back(json::parse(line));
    expectSchema("StreamEvent", events.back());
  }
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "receipt");
  bool out = false, err = false, denied = false;
  for (const auto& e : events) {
    if (e["type"] == "stdout" && e["data"].get<std::string>().find("one") != std::string::npos)
      out = true;
    if (e["type"] == "stderr" && e["data"].get<std::string>().find("two") != std::string::npos)
      err = true;
    if (e["type"] == "network" && e["decision"] == "deny" && e["host"] == "denied.example")
      denied = true;
  }
  EXPECT_TRUE(out);
  EXPECT_TRUE(err);
  EXPECT_TRUE(denied);
  EXPECT_EQ(events.back()["receipt"]["network"]["denied"], 1);
}

TEST_F(ServeSocketTest, AClientThatGoesAwayEndsItsRunAndTheReceiptIsStored) {
  REQUIRE_SANDBOX();
  start();
  {
    auto h = Http::unix(socket());
    h.send("POST", "/v1/runs",
           R"({"workflow":"shell","argv":["/bin/sh","-c","echo started; sleep 60"]})",
           "Accept: application/x-ndjson\r\n");
    ASSERT_EQ(h.readHead().status, 200);
    EXPECT_NE(h.nextLine().find("started"), std::string::npos);
    h.close();
  }
  // The run ends (stopped), its receipt is stored, and /metrics counted it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  std::string metrics;
  while (std::chrono::steady_clock::now() < deadline) {
    metrics = call("GET", "/metrics").body;
    if (metrics.find("sluice_runs_total 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(metrics.find("sluice_runs_total 1"), std::string::npos) << metrics;
}

// What a program prints while the daemon is still writing earlier lines to a client that reads
// slowly reaches the client at once: the wake that announced it came while no wait was pending
// (the daemon was in a write), and it must not wait for the next line (here, a minute away).
TEST_F(ServeSocketTest, AStreamDeliversWhatArrivedWhileItWroteToASlowClient) {
  REQUIRE_SANDBOX();
  start();
  auto h = Http::unix(socket());
  h.send("POST", "/v1/runs",
         R"({"workflow":"shell","argv":["/bin/sh","-c",)"
         R"("yes 0123456789abcdef0123456789abcdef | head -c 4000000; echo; echo MARK; sleep 60"]})",
         "Accept: application/x-ndjson\r\n");
  ASSERT_EQ(h.readHead().status, 200);
  // Not reading: the daemon's writes fill the socket and wait while the program prints MARK.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  h.receiveTimeout(15);
  bool mark = false;
  std::size_t lines = 0;
  while (!mark) {
    const std::string line = h.nextLine();
    if (line.empty()) break;
    ++lines;
    mark = line.find("MARK") != std::string::npos;
  }
  EXPECT_TRUE(mark) << "MARK not streamed within 15 s, after " << lines << " lines";
  h.close();
}

TEST_F(ServeTest, MetricsMoveWithRuns) {
  REQUIRE_SANDBOX();
  start();
  auto before = call("GET", "/metrics");
  ASSERT_EQ(before.status, 200);
  EXPECT_NE(before.body.find("sluice_runs_total 0"), std::string::npos);
  EXPECT_NE(before.body.find("# TYPE sluice_run_start_seconds histogram"), std::string::npos);
  auto run = call("POST", "/v1/runs",
                  R"({"workflow":"web","argv":["curl","-s","https://denied.example/"]})");
  ASSERT_EQ(run.status, 200) << run.body;
  auto after = call("GET", "/metrics").body;
  // The attempts /metrics counts are the receipt's (docs/audit.md "What is counted").
  const auto receipt = nlohmann::json::parse(run.body);
  for (const char* outcome : {"allowed", "denied", "failed"})
    EXPECT_NE(after.find("sluice_network_attempts_total{outcome=\"" + std::string(outcome) +
                         "\"} " + std::to_string(receipt["network"][outcome].get<int>())),
              std::string::npos)
        << outcome << "\n"
        << after << "\n"
        << receipt["network"].dump();
  EXPECT_EQ(receipt["network"]["denied"], 1) << receipt["network"].dump();
  EXPECT_NE(after.find("sluice_runs_total 1"), std::string::npos) << after;
  EXPECT_NE(after.find("sluice_run_start_seconds_count 1"), std::string::npos) << after;
  EXPECT_NE(after.find("sluice_decisions_total{decision=\"deny\",reason=\"no_matching_rule\"} 1"),
            std::string::npos)
      << after;
  for (const char* name : {"sluice_sessions_active", "sluice_proxy_bytes_total",
                           "sluice_audit_queue_depth", "sluice_pool_ready"})
    EXPECT_NE(after.find(name), std::string::npos) << name;
}

// Learn mode is refused (403 learn_not_allowed) unless serve runs with --allow-learn.
TEST_F(ServeTest, LearnModeNeedsAllowLearn) {
  start();
  expectError(call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"],"learn":true})"), 403,
              "learn_not_allowed");
  expectError(call("POST", "/v1/sessions", R"({"workflow":"shell","learn":true})"), 403,
              "learn_not_allowed");
  expectError(call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"],"learn":1})"), 400,
              "bad_request");
}

// With --allow-learn a run may learn (its receipt says so); with --shadow-policy-dir every row
// of workflow `web` is decided by the candidate too, and /metrics counts the disagreements.
TEST_F(ServeTest, AllowedLearnRunsAndShadowDecisionsAreCounted) {
  REQUIRE_SANDBOX();
  fs::create_directories(dir_ / "shadow");
  std::ofstream(dir_ / "shadow" / "web.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: web\negress:\n  rules:\n"
         "    - {id: also-denied, action: allow, hosts: [denied.example], ports: [443]}\n";
  auto o = options();
  o.allow_learn = true;
  o.shadow_policy_dir = (dir_ / "shadow").string();
  start(o);
  auto run = call("POST", "/v1/runs",
                  R"({"workflow":"web","argv":["curl","-s","https://denied.example/"]})");
  ASSERT_EQ(run.status, 200) << run.body;
  auto metrics = call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("sluice_shadow_decisions_total{agree=\"false\"} 1"), std::string::npos)
      << metrics;
  auto learn = call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"],"learn":true})");
  ASSERT_EQ(learn.status, 200) << learn.body;
  const auto receipt = nlohmann::json::parse(learn.body);
  EXPECT_EQ(receipt.value("mode", std::string()), "learn") << learn.body;
  expectSchema("Receipt", receipt);
}

// A session's own candidate (POST /v1/sessions "shadow_policy") decides alongside its execs; a
// broken one is refused with where it is broken, and no session is opened.
TEST_F(ServeTest, ASessionsOwnShadowPolicyIsDecidedAlongside) {
  REQUIRE_SANDBOX();
  start();
  const nlohmann::json broken = {
      {"workflow", "web"},
      {"shadow_policy", "apiVersion: sluice/v1\nkind: Workflow\nname: web\negress: [\n"}};
  auto bad = call("POST", "/v1/sessions", broken.dump());
  expectError(bad, 400, "bad_request");
  EXPECT_NE(bad.body.find("shadow_policy.yaml:"), std::string::npos) << bad.body;
  const nlohmann::json other = {
      {"workflow", "web"},
      {"shadow_policy", "apiVersion: sluice/v1\nkind: Workflow\nname: shell\n"}};
  expectError(call("POST", "/v1/sessions", other.dump()), 400, "bad_request");

  const nlohmann::json body = {
      {"workflow", "web"},
      {"shadow_policy",
       "apiVersion: sluice/v1\nkind: Workflow\nname: web\negress:\n  rules:\n"
       "    - {id: also-denied, action: allow, hosts: [denied.example], ports: [443]}\n"}};
  auto created = call("POST", "/v1/sessions", body.dump());
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];
  auto exec = call("POST", "/v1/sessions/" + id + "/exec",
                   R"({"argv":["curl","-s","https://denied.example/"]})");
  ASSERT_EQ(exec.status, 200) << exec.body;
  auto metrics = call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("sluice_shadow_decisions_total{agree=\"false\"} 1"), std::string::npos)
      << metrics;
  EXPECT_EQ(call("DELETE", "/v1/sessions/" + id).status, 200);
}

TEST_F(ServeSocketTest, DrainRefusesNewWorkAndStopsWhatOutlivesIt) {
  REQUIRE_SANDBOX();
  start();
  std::thread slow([&] {
    auto r = call("POST", "/v1/runs", R"({"workflow":"shell","argv":["sleep","60"]})");
    // Stopped at the end of the drain, and answered with its receipt.
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(r.js().contains("execution_id")) << r.body;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::thread drainer([&] { server_->drain(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  expectError(call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})"), 503, "draining");
  drainer.join();
  slow.join();
  EXPECT_FALSE(fs::exists(socket()));
}

}  // namespace

namespace {

using sluice::testing::shellOutput;
auto shell(const std::string& cmd) { return shellOutput(cmd); }

TEST_F(ServeTest, SessionsKeepFilesBetweenExecsAndEndWithASummary) {
  REQUIRE_SANDBOX();
  start();
  auto created = call("POST", "/v1/sessions", R"({"workflow":"shell","idle_timeout":"1m"})");
  ASSERT_EQ(created.status, 201) << created.body;
  expectSchema("Session", created.js());
  const std::string id = created.js()["id"];
  // The exec body is checked like a run's (argv, stdin, env), plus cwd and timeout.
  expectError(call("POST", "/v1/sessions/" + id + "/exec", R"({"argv":[]})"), 400, "bad_request");
  expectError(call("POST", "/v1/sessions/" + id + "/exec", R"({"argv":["true"],"env":{"A":1}})"),
              400, "bad_request");
  expectError(call("POST", "/v1/sessions/" + id + "/exec", R"({"argv":["true"],"shell":1})"), 400,
              "bad_request");
  auto put = call("PUT", "/v1/sessions/" + id + "/files/work/data.txt", "hello session");
  ASSERT_EQ(put.status, 201) << put.body;
  expectSchema("FileWritten", put.js());
  EXPECT_EQ(put.js()["bytes"], 13);
  auto e1 = call(
      "POST", "/v1/sessions/" + id + "/exec",
      R"({"argv":["/bin/sh","-c","cat /work/data.txt; echo more >> /work/data.txt; echo out > /output/o.txt; sleep 100 &"]})");
  ASSERT_EQ(e1.status, 200) << e1.body;
  EXPECT_EQ(e1.js()["stdout"]["text"], "hello session");
  EXPECT_EQ(e1.js()["session_id"], id);
  expectSchema("Receipt", e1.js());
  auto e2 = call("POST", "/v1/sessions/" + id + "/exec",
                 R"({"argv":["/bin/sh","-c","cat /work/data.txt; pgrep sleep || echo no-sleep"]})");
  ASSERT_EQ(e2.status, 200) << e2.body;
  EXPECT_EQ(e2.js()["stdout"]["text"], "hello sessionmore\nno-sleep\n") << e2.body;
  auto got = call("GET", "/v1/sessions/" + id + "/files/work/data.txt");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "hello sessionmore\n");
  auto listing = call("GET", "/v1/sessions/" + id + "/files/output");
  ASSERT_EQ(listing.status, 200) << listing.body;
  expectSchema("DirectoryListing", listing.js());
  // Nothing outside the sandbox: traversal and links planted by the program.
  ASSERT_EQ(call("POST", "/v1/sessions/" + id + "/exec",
                 R"({"argv":["/bin/sh","-c","ln -s /etc/shadow /work/s; ln -s / /work/root"]})")
                .status,
            200);
  EXPECT_GE(call("GET", "/v1/sessions/" + id + "/files/work/s").status, 400);
  EXPECT_EQ(call("GET", "/v1/sessions/" + id + "/files/work/s").body.find("root:"),
            std::string::npos);
  EXPECT_GE(call("GET", "/v1/sessions/" + id + "/files/work/root/etc/hostname").status, 400);
  EXPECT_GE(call("GET", "/v1/sessions/" + id + "/files/work/../../etc/passwd").status, 400);
  EXPECT_GE(call("PUT", "/v1/sessions/" + id + "/files/etc/evil", "x").status, 400);
  // Another caller sees no such session.
  expectError(callTcp("aaaaaaaaaaaaaaaaaaaaaaaa", "POST", "/v1/sessions/" + id + "/exec",
                      R"({"argv":["true"]})"),
              404, "not_found");
  auto ended = call("DELETE", "/v1/sessions/" + id);
  ASSERT_EQ(ended.status, 200) << ended.body;
  expectSchema("SessionSummary", ended.js());
  EXPECT_EQ(ended.js()["ended_by"], "client");
  EXPECT_EQ(ended.js()["execs"].size(), 3u);
  EXPECT_EQ(ended.js()["artifacts"].size(), 1u);
  expectError(call("POST", "/v1/sessions/" + id + "/exec", R"({"argv":["true"]})"), 404,
              "not_found");
  // Each exec's receipt is the caller's; the session summary is not an execution.
  EXPECT_EQ(call("GET", "/v1/executions/" + e1.js()["execution_id"].get<std::string>()).status,
            200);
  expectError(call("GET", "/v1/executions/" + id), 404, "not_found");
}

// Each exec's receipt counts its own DNS queries (sluice's DNS in the session's namespace), not
// the session's running total.
TEST_F(ServeTest, SessionExecReceiptsCountTheirOwnDnsQueries) {
  REQUIRE_SANDBOX();
  start();
  auto created = call("POST", "/v1/sessions", R"({"workflow":"web"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];
  const std::string lookups =
      R"({"argv":["/bin/sh","-c","getent hosts allowed.example; getent hosts denied.example; )"
      R"(curl -s -o /dev/null --max-time 5 https://denied.example/; true"]})";
  std::vector<std::string> execs;
  for (int i = 0; i < 2; ++i) {
    auto e = call("POST", "/v1/sessions/" + id + "/exec", lookups);
    ASSERT_EQ(e.status, 200) << e.body;
    const auto receipt = e.js();
    execs.push_back(receipt["execution_id"]);
    ASSERT_TRUE(receipt["network"].contains("dns")) << e.body;
    const auto& dns = receipt["network"]["dns"];
    // getent asks for A and AAAA of each name: at least one query each, the denied name's
    // answers denied; the same every time (a delta, not the session's total).
    EXPECT_GE(dns["queries"].get<int>(), 2) << e.body;
    EXPECT_GE(dns["denied"].get<int>(), 1) << e.body;
    EXPECT_LT(dns["queries"].get<int>(), 12) << e.body;
  }
  ASSERT_EQ(call("DELETE", "/v1/sessions/" + id).status, 200);
  // The audit rows name the exec that made them, not the session: an auditor asking what one
  // exec reached gets exactly its own rows.
  auto count = [&](const std::string& q) {
    auto [rc, out] =
        sluice::testing::shellOutput(std::string(SLUICE_BINARY) + " audit sql --db " +
                                     (dir_ / "audit.db").string() + " --format csv \"" + q + "\"");
    const auto nl = out.find('\n');
    return rc != 0 || nl == std::string::npos ? -1L : std::atol(out.c_str() + nl + 1);
  };
  for (const auto& ex : execs) {
    SCOPED_TRACE(ex);
    EXPECT_GE(count("SELECT count(*) FROM dns_queries WHERE execution_id = '" + ex + "'"), 2);
    EXPECT_EQ(count("SELECT count(*) FROM connections WHERE execution_id = '" + ex +
                    "' AND host = 'denied.example' AND decision = 'deny'"),
              1);
  }
  EXPECT_EQ(count("SELECT count(*) FROM dns_queries WHERE execution_id = '" + id + "'"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE execution_id = '" + id + "'"), 0);
}

TEST_F(ServeTest, IdleSessionsEndByThemselves) {
  REQUIRE_SANDBOX();
  start();
  auto created = call("POST", "/v1/sessions", R"({"workflow":"shell","idle_timeout":"1s"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  expectError(call("DELETE", "/v1/sessions/" + id), 404, "not_found");
  EXPECT_NE(call("GET", "/metrics").body.find("sluice_sessions_active 0"), std::string::npos);
}

TEST_F(ServeTest, MaxSessionsIs429) {
  REQUIRE_SANDBOX();
  auto o = options();
  o.max_sessions = 1;
  start(o);
  ASSERT_EQ(call("POST", "/v1/sessions", R"({"workflow":"shell"})").status, 201);
  expectError(call("POST", "/v1/sessions", R"({"workflow":"shell"})"), 429, "too_many_sessions");
}

// Real clients: curl over the Unix socket, and the standard-library Python client's demo
// (session, upload, exec, download /output, delete) over the socket and over TCP with a token.
TEST_F(ServeSocketTest, CurlAndThePythonClientWork) {
  REQUIRE_SANDBOX();
  start();
  auto [rc, out] = shell("curl -s --unix-socket " + socket() + " http://sluice/v1/healthz");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"ok\""), std::string::npos) << out;
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string client = SLUICE_SOURCE_DIR "/examples/clients/sluice_client.py";
  auto demo = shell(python + " " + client + " --connect unix:" + socket() +
                    " --workflow shell --out " + (dir_ / "out").string());
  EXPECT_EQ(demo.first, 0) << demo.second;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "result.json")) << demo.second;
  std::ofstream(dir_ / "token") << "bbbbbbbbbbbbbbbbbbbbbbbb\n";
  auto tcp = shell(python + " " + client + " --connect http://127.0.0.1:" + std::to_string(port_) +
                   " --token-file " + (dir_ / "token").string() +
                   " --workflow shell --stream --out " + (dir_ / "out2").string());
  EXPECT_EQ(tcp.first, 0) << tcp.second;
  EXPECT_TRUE(fs::exists(dir_ / "out2" / "details" / "values.txt")) << tcp.second;
}

}  // namespace

namespace {

std::string metricValue(const std::string& metrics, const std::string& series) {
  auto at = metrics.find(series + " ");
  if (at == std::string::npos) return "";
  auto start = at + series.size() + 1;
  return metrics.substr(start, metrics.find('\n', start) - start);
}

// The warm pool: runs take prepared sandboxes (each used once), the pool refills, and a reload
// drops the sandboxes built on the old policy.
TEST_F(ServeTest, WarmPoolServesRunsOnceEachAndFollowsReloads) {
  REQUIRE_SANDBOX();
  auto o = options();
  o.pool = 2;
  start(o);
  const std::string ready = "sluice_pool_ready{workflow=\"shell\"}";
  auto waitReady = [&](const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::string got;
    while (std::chrono::steady_clock::now() < deadline) {
      got = metricValue(call("GET", "/metrics").body, ready);
      if (got == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << ready << " stayed " << got << ", wanted " << want;
    return false;
  };
  ASSERT_TRUE(waitReady("2"));
  std::set<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto r =
        call("POST", "/v1/runs",
             R"({"workflow":"shell","argv":["/bin/sh","-c","cat; ls /work | wc -l"],"stdin":"x"})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.js()["stdout"]["text"], "x0\n") << "a prepared sandbox was used twice";
    expectSchema("Receipt", r.js());
    EXPECT_TRUE(ids.insert(r.js()["execution_id"].get<std::string>()).second);
    // Files of one run are never seen by the next.
    ASSERT_EQ(call("POST", "/v1/runs",
                   R"({"workflow":"shell","argv":["true"],"files":{"/work/left.txt":"eA=="}})")
                  .status,
              200);
  }
  ASSERT_TRUE(waitReady("2"));
  // A new policy text: every sandbox prepared on the old one is dropped.
  std::ofstream(dir_ / "policies" / "shell.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: shell\ndescription: reloaded\n"
         "sandbox:\n  timeout: 120s\n  memory: 256MiB\n  network: none\n";
  ASSERT_TRUE(reload().has_value());
  auto w = call("GET", "/v1/workflows").js();
  std::string sha;
  for (const auto& item : w)
    if (item["name"] == "shell") sha = item["policy_sha256"];
  auto r = call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.js()["policy_sha256"], sha);
}

// New sessions take prepared sandboxes too: the session has the sandbox's id ("sb-", the id its
// listeners were attached with; a session built on demand is "se-"), each prepared sandbox goes
// to one session only (a file one session leaves is never seen by another), the pool refills
// while the session lives, and after a reload a session gets a sandbox built on the new policy.
// A learn run is refused without --allow-learn even when a prepared sandbox of its workflow is
// ready, and leaves that sandbox in the pool (prepared sandboxes only enforce).
TEST_F(ServeTest, ALearnRunIsRefusedBeforeTheWarmPoolIsAsked) {
  REQUIRE_SANDBOX();
  auto o = options();
  o.pool = 1;
  start(o);
  const std::string ready = "sluice_pool_ready{workflow=\"shell\"}";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (metricValue(call("GET", "/metrics").body, ready) != "1" &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(metricValue(call("GET", "/metrics").body, ready), "1");
  expectError(call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"],"learn":true})"), 403,
              "learn_not_allowed");
  EXPECT_EQ(metricValue(call("GET", "/metrics").body, ready), "1");
}

TEST_F(ServeTest, WarmPoolServesNewSessionsOnceEachAndFollowsReloads) {
  REQUIRE_SANDBOX();
  std::ofstream(dir_ / "policies" / "nopool.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: nopool\ndescription: no pool\n"
         "sandbox:\n  timeout: 120s\n  network: none\n  pool: 0\n";
  auto o = options();
  o.pool = 1;
  start(o);
  const std::string ready = "sluice_pool_ready{workflow=\"shell\"}";
  auto waitReady = [&](const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::string got;
    while (std::chrono::steady_clock::now() < deadline) {
      got = metricValue(call("GET", "/metrics").body, ready);
      if (got == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << ready << " stayed " << got << ", wanted " << want;
    return false;
  };
  auto exec = [&](const std::string& id, const std::string& script) {
    auto r = call("POST", "/v1/sessions/" + id + "/exec",
                  json{{"argv", {"/bin/bash", "-c", script}}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.js();
  };
  std::set<std::string> ids;
  std::vector<std::string> open;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(waitReady("1"));
    auto created = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
    ASSERT_EQ(created.status, 201) << created.body;
    expectSchema("Session", created.js());
    const std::string id = created.js()["id"];
    EXPECT_TRUE(id.starts_with("sb-")) << id << " was not taken from the pool";
    EXPECT_TRUE(ids.insert(id).second) << id << " handed out twice";
    // The session works, keeps its files between execs, and starts with nothing of another's.
    auto first = exec(id, "ls -A /work /tmp /output | grep -v : | grep . | wc -l; echo " + id +
                              " > /work/mine; sleep 100 &");
    EXPECT_EQ(first["stdout"]["text"], "0\n") << "a prepared sandbox was used twice";
    EXPECT_EQ(first["session_id"], id);
    expectSchema("Receipt", first);
    EXPECT_EQ(exec(id, "cat /work/mine; pgrep sleep || echo no-sleep")["stdout"]["text"],
              id + "\nno-sleep\n");
    open.push_back(id);  // kept open: its sandbox is not the pool's any more
  }
  // The pool refilled while the sessions live; a run takes a sandbox none of them has.
  ASSERT_TRUE(waitReady("1"));
  auto run = call("POST", "/v1/runs",
                  R"({"workflow":"shell","argv":["/bin/sh","-c","ls -A /work | wc -l"]})");
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(run.js()["stdout"]["text"], "0\n");
  EXPECT_TRUE(ids.insert(run.js()["execution_id"].get<std::string>()).second);
  for (const auto& id : open) {
    auto ended = call("DELETE", "/v1/sessions/" + id);
    ASSERT_EQ(ended.status, 200) << ended.body;
    EXPECT_EQ(ended.js()["execs"].size(), 2u);
  }
  // A workflow without a pool (sandbox.pool: 0) builds its session's sandbox on demand.
  auto cold = call("POST", "/v1/sessions", R"({"workflow":"nopool"})");
  ASSERT_EQ(cold.status, 201) << cold.body;
  const std::string cold_id = cold.js()["id"];
  EXPECT_TRUE(cold_id.starts_with("se-")) << cold_id;
  EXPECT_EQ(exec(cold_id, "echo ok")["stdout"]["text"], "ok\n");
  EXPECT_EQ(call("DELETE", "/v1/sessions/" + cold_id).status, 200);

  // A reload that gives `shell` the proxy: a session from the pool must then have the
  // listener on 127.0.0.1:3128 that only a sandbox built on the new policy has.
  ASSERT_TRUE(waitReady("1"));
  const std::string probe =
      "(echo > /dev/tcp/127.0.0.1/3128) 2>/dev/null && echo listener || echo none";
  {
    auto before = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
    ASSERT_EQ(before.status, 201) << before.body;
    const std::string id = before.js()["id"];
    EXPECT_TRUE(id.starts_with("sb-")) << id;
    EXPECT_EQ(exec(id, probe)["stdout"]["text"], "none\n");
    EXPECT_EQ(call("DELETE", "/v1/sessions/" + id).status, 200);
  }
  ASSERT_TRUE(waitReady("1"));
  std::ofstream(dir_ / "policies" / "shell.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: shell\ndescription: now with a proxy\n"
         "sandbox:\n  timeout: 120s\n  memory: 256MiB\n  network: proxy\n"
         "egress:\n  rules:\n    - {id: one, action: allow, hosts: [allowed.example], ports: "
         "[443]}\n";
  ASSERT_TRUE(reload().has_value());
  std::string sha;
  for (const auto& item : call("GET", "/v1/workflows").js())
    if (item["name"] == "shell") sha = item["policy_sha256"];
  ASSERT_TRUE(waitReady("1"));
  auto after = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
  ASSERT_EQ(after.status, 201) << after.body;
  const std::string id = after.js()["id"];
  EXPECT_TRUE(id.starts_with("sb-")) << id;
  EXPECT_TRUE(ids.insert(id).second) << id << " handed out twice";
  auto receipt = exec(id, probe);
  EXPECT_EQ(receipt["stdout"]["text"], "listener\n") << "a sandbox of the old policy was used";
  EXPECT_EQ(receipt["policy_sha256"], sha);
  EXPECT_EQ(call("DELETE", "/v1/sessions/" + id).status, 200);
}

}  // namespace

namespace {

// The real daemon process: SIGTERM drains (running execs stopped after --drain, every session
// ends with its summary receipt) and leaves no process or cgroup; SIGKILL takes every sandbox
// with it and `sluice gc` removes the cgroups; the audit store verifies either way.
class ServeProcessTest : public ServeSocketTest {
 protected:
  // A daemon a failed assertion left running is ended here, so no `sluice serve` outlives its
  // test; one the test already reaped is skipped (waitpid reports it is not our child).
  void TearDown() override {
    for (pid_t pid : daemons_) {
      if (::waitpid(pid, nullptr, WNOHANG) != 0) continue;
      ::kill(pid, SIGTERM);
      bool reaped = false;
      for (int i = 0; i < 150 && !reaped; ++i) {
        reaped = ::waitpid(pid, nullptr, WNOHANG) != 0;
        if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!reaped) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
    ServeSocketTest::TearDown();
  }
  // `timing_log`: the daemon runs with SLUICE_TIMING=1, its stderr in that file.
  pid_t spawnDaemon(const std::vector<std::string>& extra = {},
                    const std::string& timing_log = "") {
    // Built before fork: the child only dups and execs.
    std::vector<std::string> env_text;
    for (char** e = environ; *e; ++e) env_text.emplace_back(*e);
    if (!timing_log.empty()) env_text.emplace_back("SLUICE_TIMING=1");
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(timing_log.empty() ? devnull
                                : ::open(timing_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
             2);
      std::vector<std::string> args = {SLUICE_BINARY,  "serve",
                                       "--policy-dir", (dir_ / "policies").string(),
                                       "--listen",     "unix:" + socket(),
                                       "--audit",      (dir_ / "audit.db").string(),
                                       "--drain",      "1s"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execve(SLUICE_BINARY, argv.data(), envp.data());
      ::_exit(99);
    }
    if (pid > 0) daemons_.push_back(pid);
    for (int i = 0; i < 200 && !fs::exists(socket()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return pid;
  }
  int running(const std::string& marker) {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), {});
      if (cmd.starts_with(std::string("sleep\0", 6) + marker)) ++n;
    }
    return n;
  }
  // A session whose exec runs `sleep MARKER` (held open by a client thread).
  std::thread longExec(const std::string& marker, std::string& session) {
    auto created = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
    EXPECT_EQ(created.status, 201) << created.body;
    session = created.js().value("id", "");
    std::thread t([this, session, marker] {
      call("POST", "/v1/sessions/" + session + "/exec",
           R"({"argv":["sleep",")" + marker + R"("]})");
    });
    for (int i = 0; i < 200 && running(marker) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(running(marker), 1);
    return t;
  }
  std::string sql(const std::string& statement) {
    auto [rc, out] = shell(std::string(SLUICE_BINARY) + " audit sql --db " +
                           (dir_ / "audit.db").string() + " --format csv \"" + statement + "\"");
    EXPECT_EQ(rc, 0) << out;
    return out;
  }

 private:
  std::vector<pid_t> daemons_;
};

TEST_F(ServeProcessTest, TimingLogsEveryStepOfAnExecInOrder) {
  REQUIRE_SANDBOX();
  const fs::path log = dir_ / "serve-timing.log";
  ASSERT_GT(spawnDaemon({}, log.string()), 0);
  auto created = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string session = created.js().value("id", "");
  auto ran = call("POST", "/v1/sessions/" + session + "/exec", R"({"argv":["true"]})");
  ASSERT_EQ(ran.status, 200) << ran.body;
  // The line is logged once the answer is written, so it may follow the answer by a moment.
  std::string line;
  for (int i = 0; i < 250 && line.empty(); ++i) {
    std::istringstream text(sluice::testing::slurp(log));
    for (std::string l; std::getline(text, l);)
      if (l.find("timing: ") != std::string::npos && l.find("sandbox taken") != std::string::npos)
        line = l;
    if (line.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(line.empty()) << sluice::testing::slurp(log);
  std::size_t at = 0;
  for (const char* step :
       {"handed to a worker thread ", "sandbox taken, exec built and sent ",
        "program run and reaped, counters read ", "receipt built and committed ", "answer's JSON ",
        "answer written ", "back on the connection's thread ", "total "}) {
    const auto found = line.find(step, at);
    ASSERT_NE(found, std::string::npos) << step << " in " << line;
    at = found;
  }
}

TEST_F(ServeProcessTest, SigtermDrainsEndsSessionsWithReceiptsAndLeavesNothing) {
  REQUIRE_SANDBOX();
  const std::string marker = "4343" + std::to_string(::getpid());
  pid_t daemon = spawnDaemon();
  ASSERT_GT(daemon, 0);
  std::string session;
  std::thread t = longExec(marker, session);
  ::kill(daemon, SIGTERM);
  int status = 0;
  ::waitpid(daemon, &status, 0);
  t.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(running(marker), 0);
  for (const std::string& name : sluice::testing::sluiceCgroupNames())
    EXPECT_FALSE(name.starts_with(std::to_string(daemon) + ".")) << name;
  EXPECT_FALSE(fs::exists(socket()));
  EXPECT_NE(
      sql("SELECT json_extract(receipt, '$.ended_by') FROM executions WHERE id = '" + session + "'")
          .find("shutdown"),
      std::string::npos);
  // The session's summary and the exec that was stopped by the drain, each with its receipt.
  EXPECT_NE(
      sql("SELECT count(*) AS n FROM executions WHERE session_id = '" + session + "'").find("\n2"),
      std::string::npos);
  auto [rc, out] =
      shell(std::string(SLUICE_BINARY) + " audit verify --db " + (dir_ / "audit.db").string());
  EXPECT_EQ(rc, 0) << out;
}

// The daemon forks a zygote first thing, before it reads its tokens, secrets or keys, and every
// sandbox's init descends from that zygote: an init that were a clone of the daemon would hold a
// copy of everything the daemon had in memory, the callers' bearer tokens among it. Tokens are
// the control: the same scan finds them in the daemon. The zygote leaves with the daemon, and a
// daemon whose zygote died still runs sandboxes (cloned from itself, with a warning).
TEST_F(ServeProcessTest, SandboxInitsComeFromAZygoteAndHoldNoCopyOfTheDaemonsTokens) {
  REQUIRE_SANDBOX();
  const std::string token = "zygotetesttoken" + std::to_string(::getpid()) + "qq";
  std::ofstream(dir_ / "tokens") << "agent-z " << token << "\n";
  pid_t daemon = spawnDaemon({"--token-file", (dir_ / "tokens").string(), "--listen", "127.0.0.1:0",
                              "--listen", "unix:" + socket(), "--pool", "1"});
  ASSERT_GT(daemon, 0);
  auto zygotes =
      sluice::testing::waitForChildrenNamed(daemon, "sluice-zygote", std::chrono::seconds(5));
  ASSERT_EQ(zygotes.size(), 1u);
  auto created = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string session = created.js().value("id", "");
  auto inits =
      sluice::testing::waitForChildrenNamed(daemon, "sluice-init", std::chrono::seconds(5));
  ASSERT_GE(inits.size(), 1u);  // the session's, and the pool's prepared one
  auto control = sluice::testing::scanMemory(daemon, token);
  EXPECT_FALSE(control.hits.empty()) << "the scan does not find the token in the daemon";
  std::size_t scanned = 0;
  for (pid_t init : inits) {
    auto scan = sluice::testing::scanMemory(init, token);
    if (scan.gone) continue;  // a pool's sandbox being replaced may end as it is read
    ++scanned;
    EXPECT_GT(scan.scanned, 0u);
    EXPECT_TRUE(scan.hits.empty()) << "init " << init << " holds the token in " << scan.hits[0];
  }
  EXPECT_GE(scanned, 1u) << "no init could be read";
  auto ran = call("POST", "/v1/sessions/" + session + "/exec", R"({"argv":["true"]})");
  EXPECT_EQ(ran.status, 200) << ran.body;

  // Without its zygote the daemon still builds sandboxes.
  ::kill(zygotes[0], SIGKILL);
  for (int i = 0; i < 3; ++i) {
    auto run = call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})");
    EXPECT_EQ(run.status, 200) << run.body;
    EXPECT_EQ(run.js()["exit"]["code"], 0) << run.body;
  }
  ::kill(daemon, SIGTERM);
  int status = 0;
  ::waitpid(daemon, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(sluice::testing::childrenNamed(daemon, "sluice-init").empty());
}

// The zygote's socket would let whoever holds it have sandboxes' helpers forked as root, and
// the daemon's API socket and audit files are its own: no sandbox process may hold any of
// them, and a program holds nothing but its stdio. Checked from outside, on a session's init
// and on a program running in it, by the files the descriptors point at.
TEST_F(ServeProcessTest, SandboxProcessesHoldNoDescriptorOfTheDaemonOrItsZygote) {
  REQUIRE_SANDBOX();
  const std::string marker = "4545" + std::to_string(::getpid());
  pid_t daemon = spawnDaemon();
  ASSERT_GT(daemon, 0);
  auto zygotes =
      sluice::testing::waitForChildrenNamed(daemon, "sluice-zygote", std::chrono::seconds(5));
  ASSERT_EQ(zygotes.size(), 1u);
  std::string session;
  std::thread t = longExec(marker, session);
  auto fileIds = [](pid_t pid) {
    std::map<std::string, std::pair<dev_t, ino_t>> out;  // fd -> what it points at
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0)
        out[e.path().filename().string()] = {st.st_dev, st.st_ino};
    }
    return out;
  };
  std::set<std::pair<dev_t, ino_t>> forbidden;
  for (const auto& [fd, id] : fileIds(zygotes[0]))
    if (std::stoi(fd) > 2) forbidden.insert(id);  // its socket (0-2: the daemon's stdio)
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(daemon) + "/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(e.path(), ec).string();
    struct stat st {};
    if (target.find("audit.db") != std::string::npos && ::stat(e.path().c_str(), &st) == 0)
      forbidden.insert({st.st_dev, st.st_ino});
  }
  struct stat api {};
  ASSERT_EQ(::stat(socket().c_str(), &api), 0);
  ASSERT_GE(forbidden.size(), 2u) << "the zygote's socket and the audit store were not found";
  auto inits = sluice::testing::childrenNamed(daemon, "sluice-init");
  ASSERT_FALSE(inits.empty());
  pid_t program = -1;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream f(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    if (cmd.starts_with(std::string("sleep\0", 6) + marker))
      program = std::stoi(e.path().filename().string());
  }
  ASSERT_GT(program, 0);
  for (pid_t pid : {inits[0], program}) {
    SCOPED_TRACE("pid " + std::to_string(pid));
    for (const auto& [fd, id] : fileIds(pid)) {
      EXPECT_FALSE(forbidden.contains(id)) << "fd " << fd << " is the daemon's or the zygote's";
      EXPECT_FALSE(id.first == api.st_dev && id.second == api.st_ino) << "fd " << fd;
    }
  }
  std::set<std::string> program_fds;
  for (const auto& [fd, id] : fileIds(program)) program_fds.insert(fd);
  EXPECT_EQ(program_fds, (std::set<std::string>{"0", "1", "2"}));
  ::kill(daemon, SIGTERM);
  ::waitpid(daemon, nullptr, 0);
  t.join();
}

TEST_F(ServeProcessTest, SigtermLeavesNoZygoteBehind) {
  REQUIRE_SANDBOX();
  pid_t daemon = spawnDaemon();
  ASSERT_GT(daemon, 0);
  auto zygotes =
      sluice::testing::waitForChildrenNamed(daemon, "sluice-zygote", std::chrono::seconds(5));
  ASSERT_EQ(zygotes.size(), 1u);
  auto run = call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})");
  EXPECT_EQ(run.status, 200) << run.body;
  ::kill(daemon, SIGTERM);
  int status = 0;
  ::waitpid(daemon, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    std::string stat = sluice::testing::slurp("/proc/" + std::to_string(zygotes[0]) + "/stat");
    gone = stat.empty() || stat.find("(sluice-zygote)") == std::string::npos ||
           stat.find(") Z") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "the zygote outlived its daemon";
}

TEST_F(ServeProcessTest, SigkillTakesEverySandboxWithItAndGcCleansUp) {
  REQUIRE_SANDBOX();
  const std::string marker = "4444" + std::to_string(::getpid());
  pid_t daemon = spawnDaemon();
  ASSERT_GT(daemon, 0);
  std::string session;
  std::thread t = longExec(marker, session);
  ::kill(daemon, SIGKILL);
  ::waitpid(daemon, nullptr, 0);
  t.join();
  for (int i = 0; i < 100 && running(marker) > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(running(marker), 0);
  auto gc = shell(std::string(SLUICE_BINARY) + " gc");
  EXPECT_EQ(gc.first, 0) << gc.second;
  for (const std::string& name : sluice::testing::sluiceCgroupNames())
    EXPECT_FALSE(name.starts_with(std::to_string(daemon) + ".")) << name;
  auto [rc, out] =
      shell(std::string(SLUICE_BINARY) + " audit verify --db " + (dir_ / "audit.db").string());
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace

namespace {

std::size_t rssBytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

std::size_t openFds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// 50 concurrent sessions, each 20 execs with a file round-trip per exec, all without error;
// afterwards the daemon's RSS is back within 1 MiB and its open fds where they were.
TEST_F(ServeTest, FiftyConcurrentSessionsLeaveNothingBehind) {
  REQUIRE_SANDBOX();
  auto o = options();
  // One caller holds all fifty sessions and runs fifty execs at once: more than its default
  // shares (half of each total when the daemon knows of two callers or more, docs/serve.md
  // "Quotas").
  o.max_sessions_per_caller = o.max_sessions;
  o.max_runs_per_caller = o.max_runs;
  start(o);
  auto one = [&](int n, int execs, std::atomic<int>& errors) {
    auto created = call("POST", "/v1/sessions", R"({"workflow":"shell"})");
    if (created.status != 201) {
      ++errors;
      return;
    }
    const std::string id = created.js()["id"];
    for (int i = 0; i < execs; ++i) {
      const std::string content = "s" + std::to_string(n) + "-" + std::to_string(i);
      if (call("PUT", "/v1/sessions/" + id + "/files/work/in.txt", content).status != 201) ++errors;
      auto r = call("POST", "/v1/sessions/" + id + "/exec",
                    R"({"argv":["/bin/sh","-c","cat /work/in.txt > /work/out.txt"]})");
      if (r.status != 200 || r.js()["exit"]["code"] != 0) ++errors;
      if (call("GET", "/v1/sessions/" + id + "/files/work/out.txt").body != content) ++errors;
    }
    if (call("DELETE", "/v1/sessions/" + id).status != 200) ++errors;
  };
  // A first round of the same load brings the high-water marks that are not leaks to their
  // level (glibc's cache of freed thread stacks, malloc arenas, SQLite's page cache). The same
  // length too: with 2 execs a session instead of 20, the sessions overlapped less and the
  // second round's high water alone came to 0.7-1.2 MiB above the first's.
  std::atomic<int> warm_errors{0};
  {
    std::vector<std::thread> warm;
    for (int n = 0; n < 50; ++n) warm.emplace_back(one, 100 + n, 20, std::ref(warm_errors));
    for (auto& t : warm) t.join();
  }
  ::malloc_trim(0);
  const std::size_t rss = rssBytes(), fds = openFds();
  std::atomic<int> errors{0};
  std::vector<std::thread> clients;
  for (int n = 0; n < 50; ++n) clients.emplace_back(one, n + 1, 20, std::ref(errors));
  for (auto& t : clients) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(warm_errors.load(), 0);
  // Session threads and sockets wind down asynchronously: give them a moment.
  for (int i = 0; i < 250 && openFds() > fds; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::malloc_trim(0);
  EXPECT_LE(openFds(), fds);
  EXPECT_LT(rssBytes(), rss + (1u << 20)) << "RSS grew from " << rss << " to " << rssBytes();
  EXPECT_NE(call("GET", "/metrics").body.find("sluice_sessions_active 0"), std::string::npos);
}

// Thousands of one-shot runs: no growth.
TEST_F(ServeTest, ThousandsOfRunsDoNotGrowTheDaemon) {
  REQUIRE_SANDBOX();
  start();
  auto runs = [&](int n) {
    int bad = 0;
    for (int i = 0; i < n; ++i)
      if (call("POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})").status != 200) ++bad;
    return bad;
  };
  EXPECT_EQ(runs(300), 0);
  ::malloc_trim(0);
  const std::size_t rss = rssBytes(), fds = openFds();
  EXPECT_EQ(runs(2000), 0);
  for (int i = 0; i < 250 && openFds() > fds; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::malloc_trim(0);
  EXPECT_LE(openFds(), fds);
  EXPECT_LT(rssBytes(), rss + (1u << 20)) << "RSS grew from " << rss << " to " << rssBytes();
}

}  // namespace

namespace {

namespace base = sluice::base;

// Serve's functions return base::Error; the edge renders each one once: the status from its
// code, its finer reason kept, a quota's Retry-After from that reason, the text as the message.
TEST(ApiErrorRendering, OneRenderingOfEveryBaseError) {
  const serve::ApiError quota = serve::apiError(
      serve::apiFail(base::Code::kResourceExhausted, "too_many_sessions_for_caller", "full"));
  EXPECT_EQ(quota.status, 429);
  EXPECT_EQ(quota.reason, "too_many_sessions_for_caller");
  EXPECT_EQ(quota.retry_after, serve::kSessionRetryAfter);
  const serve::ApiError runs =
      serve::apiError(serve::apiFail(base::Code::kResourceExhausted, "too_many_runs", "full"));
  EXPECT_EQ(runs.retry_after, serve::kRunRetryAfter);
  const serve::ApiError big =
      serve::apiError(serve::apiFail(base::Code::kTooLarge, "payload_too_large", "big"));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(big.retry_after, 0u);
  // No finer reason: the API's word for the code's status, or 500 internal where it has none.
  const serve::ApiError field =
      serve::apiError(base::Error(base::Code::kInvalidArgument, "must be a string", "argv"));
  EXPECT_EQ(field.status, 400);
  EXPECT_EQ(field.reason, "bad_request");
  EXPECT_EQ(field.message, "argv: must be a string");
  base::Error commit(base::Code::kIo, "database or disk is full", "audit store", 28);
  commit.cause_code = 13;  // SQLITE_FULL: logged by the edge, never in the body
  const serve::ApiError failed = serve::apiError(commit);
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(failed.reason, "internal");
  EXPECT_EQ(failed.message, "audit store: database or disk is full");
}

// The response in `wire`, parsed whole (the body read to its end), or null.
std::optional<sluice::http::response<sluice::http::string_body>> parseWhole(
    const std::string& wire) {
  sluice::http::response_parser<sluice::http::string_body> parser;
  parser.body_limit(wire.size());
  sluice::ErrorCode ec;
  std::size_t used = 0;
  while (!ec && !parser.is_done() && used < wire.size())
    used += parser.put(sluice::net::buffer(wire.data() + used, wire.size() - used), ec);
  if (ec || !parser.is_done() || used != wire.size()) return std::nullopt;
  return parser.release();
}

// An answer written by the worker thread (DirectAnswer) is the response Reply::send() writes:
// parsed back, the same status, headers and body, and Connection: close when the connection
// does not stay open. What a full socket does not take is left whole for the strand.
TEST(DirectAnswer, WritesTheWholeResponseAndLeavesWhatDoesNotFit) {
  namespace http = sluice::http;
  for (const bool keep_alive : {true, false}) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    serve::DirectAnswer answer(::dup(sv[0]), 11, keep_alive);
    EXPECT_FALSE(answer.written());
    EXPECT_TRUE(answer.write(http::status::ok, "application/json", R"({"a":1})"));
    EXPECT_TRUE(answer.written());
    EXPECT_TRUE(answer.rest().empty());
    char buf[4096];
    const ssize_t n = ::recv(sv[1], buf, sizeof buf, MSG_DONTWAIT);
    ASSERT_GT(n, 0);
    const std::string wire(buf, static_cast<std::size_t>(n));
    const auto res = parseWhole(wire);
    ASSERT_TRUE(res) << wire;
    EXPECT_EQ(res->result(), http::status::ok);
    EXPECT_EQ((*res)[http::field::content_type], "application/json");
    EXPECT_EQ((*res)[http::field::server], "sluice");
    EXPECT_EQ(res->body(), R"({"a":1})");
    EXPECT_EQ(res->keep_alive(), keep_alive) << wire;
    ::close(sv[0]);
    ::close(sv[1]);
  }
  // A body larger than the socket takes at once: the rest is kept, nothing lost or repeated.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const std::string big(4 << 20, 'x');
  serve::DirectAnswer answer(::dup(sv[0]), 11, true);
  EXPECT_FALSE(answer.write(http::status::ok, "application/json", big));
  ASSERT_FALSE(answer.rest().empty());
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = ::recv(sv[1], buf, sizeof buf, MSG_DONTWAIT)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  EXPECT_FALSE(got.empty());
  got += answer.rest();
  const auto res = parseWhole(got);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body(), big);
  ::close(sv[0]);
  ::close(sv[1]);
}

}  // namespace
