// Approvals end to end with `sluice run --approve-with CMD`: an `ask` rule holds the
// sandbox's request (plain HTTP through the proxy), its CONNECT (passthrough tunnel) or its
// redirected connection (transparent capture) until the command answers. The command is a
// Python script that reads the approval JSON on stdin, logs what it was asked, and answers by
// host: allow, deny, `allow execution`, or never (it hangs and is killed at ask.timeout).
//
// The upstream is a Python HTTP server in a network namespace the test makes (10.234.0.2, over
// a veth pair), logging every request it gets. The proxy resolves the test's names through
// /etc/hosts in a mount namespace of the run's own (as transparent_run_test.cpp does).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "isolation.hpp"
#include "netns_upstream.hpp"
#include "proc_scan.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sluice::testing::auditCount;
using sluice::testing::parseReceipt;
using sluice::testing::shellOutput;
using sluice::testing::slurp;
using sluice::testing::withHosts;
auto sh(const std::string& cmd) { return shellOutput(cmd); }

// The upstream: answers "hello PATH" to every GET and logs "GET HOST PATH".
const char kServer[] = R"PY(
import http.server, sys
log = open(sys.argv[1], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        log.write("GET %s %s\n" % (self.headers.get("Host", ""), self.path))
        body = ("hello " + self.path + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("10.234.0.2", 8080), H).serve_forever()
)PY";

// The approver (--approve-with): one line per approval it is shown, then the answer by host.
const char kApprover[] = R"PY(
import json, os, sys, time
a = json.load(sys.stdin)
with open(os.environ["AP_LOG"], "a") as f:
    f.write("%s %s %s %s %s %s %s\n" % (a["host"], a["port"], a["rule"], a["method"], a["path"],
                                        a["workflow"], a["execution_id"]))
host = a["host"]
if host.startswith("yes."):
    print("allow")
elif host.startswith("again."):
    print("allow execution")
elif host.startswith("hang."):
    open(os.environ["AP_LOG"] + ".pid", "w").write(str(os.getpid()))
    time.sleep(120)
    print("allow")
else:
    print("deny")
)PY";

// In the sandbox: one request, "LABEL code=N reason=R body=B".
const char kRequest[] = R"SH(
label=$1; shift
code=$(curl -s --max-time 30 -D /tmp/h -o /tmp/b -w '%{http_code}' "$@")
reason=$(grep -i '^x-sluice-reason:' /tmp/h | tail -n1 | tr -d '\r' | cut -d' ' -f2)
echo "$label code=$code reason=$reason body=$(head -c 100 /tmp/b | tr -d '\n')"
rm -f /tmp/h /tmp/b
)SH";

class ApprovalsRun : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    ns_ = "sluice-ap-" + std::to_string(::getpid());
    dir_ = fs::temp_directory_path() / ns_;
    fs::create_directories(dir_ / "in");
    std::ofstream(dir_ / "server.py") << kServer;
    std::ofstream(dir_ / "approver.py") << kApprover;
    std::ofstream(dir_ / "in" / "req.sh") << kRequest;
    with_hosts_ = withHosts(dir_,
                            "10.234.0.2 yes.ask.test no.ask.test again.ask.test "
                            "hang.ask.test ok.ask.test");
    std::ofstream(dir_ / "policy.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: approvals\nsandbox:\n  timeout: 60s\n"
           "  network: proxy\negress:\n  rules:\n"
           "    - id: gate\n      action: ask\n"
           "      hosts: [yes.ask.test, no.ask.test, again.ask.test, hang.ask.test]\n"
           "      ports: [8080]\n      allow_private: true\n      cidrs: [\"10.234.0.2/32\"]\n"
           "      ask: {timeout: 3s}\n"
           "    - id: open\n      action: allow\n      hosts: [ok.ask.test]\n      ports: [8080]\n"
           "      allow_private: true\n      cidrs: [\"10.234.0.2/32\"]\n";
    const std::string failed = upstream_.start(
        ns_, "ap", "10.234.0", {(dir_ / "server.py").string(), (dir_ / "upstream.log").string()},
        "http://10.234.0.2:8080/up", "hello");
    ASSERT_EQ(failed, "");
    // Only what the runs send counts (truncated, not removed: the server keeps it open).
    std::ofstream(dir_ / "upstream.log", std::ios::trunc);
  }
  void TearDown() override {
    upstream_.stop();
    fs::remove_all(dir_);
  }

  // `sluice run [--approve-with approver.py] --json -- /bin/sh -c SCRIPT`: the receipt.
  json run(const std::string& script, bool approver = true) {
    std::ofstream(dir_ / "in" / "main.sh") << script;
    const std::string approve =
        approver ? " --approve-with 'python3 " + (dir_ / "approver.py").string() + "'" : "";
    auto [rc, out] =
        sh("AP_LOG=" + (dir_ / "asked.log").string() + " " + with_hosts_ + SLUICE_BINARY +
           " run --policy " + (dir_ / "policy.yaml").string() + " --audit " + db() + approve +
           " --input " + (dir_ / "in").string() + ":in --receipt " +
           (dir_ / "receipt.json").string() + " --json -- /bin/sh /input/in/main.sh");
    json j = parseReceipt(out);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }
  std::string db() const { return (dir_ / "audit.db").string(); }
  long count(const std::string& q) { return auditCount(db(), q); }
  // Lines of a log that contain `what`.
  static int lines(const fs::path& file, const std::string& what) {
    std::istringstream in(slurp(file));
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l.find(what) != std::string::npos;
    return n;
  }
  int asked(const std::string& what) { return lines(dir_ / "asked.log", what); }
  int arrived(const std::string& what) { return lines(dir_ / "upstream.log", what); }
  static bool hasDenial(const json& r, const std::string& host, const std::string& reason) {
    for (const auto& d : r["network"]["denials"])
      if (d["host"] == host && d["reason"] == reason && d["port"] == 8080 && d["rule"] == "gate")
        return true;
    return false;
  }

  std::string ns_, with_hosts_;
  fs::path dir_;
  sluice::testing::NetnsUpstream upstream_;
};

TEST_F(ApprovalsRun, TheCommandsAnswerDecidesEachRequest) {
  REQUIRE_SANDBOX();
  auto r =
      run("R=/input/in/req.sh\n"
          "sh $R yes http://yes.ask.test:8080/y1\n"
          "sh $R no http://no.ask.test:8080/n1\n"
          "sh $R again1 http://again.ask.test:8080/a1\n"
          "sh $R again2 http://again.ask.test:8080/a2\n"
          "sh $R tunnel -p http://yes.ask.test:8080/p1\n"
          "sh $R open http://ok.ask.test:8080/o1\n");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("yes code=200 reason= body=hello /y1"), std::string::npos) << out << r.dump();
  EXPECT_NE(out.find("no code=403 reason=approval_denied"), std::string::npos) << out;
  EXPECT_NE(out.find("again1 code=200 reason= body=hello /a1"), std::string::npos) << out;
  EXPECT_NE(out.find("again2 code=200 reason= body=hello /a2"), std::string::npos) << out;
  EXPECT_NE(out.find("tunnel code=200 reason= body=hello /p1"), std::string::npos) << out;
  EXPECT_NE(out.find("open code=200 reason= body=hello /o1"), std::string::npos) << out;

  // What the command was shown: the request's method and path for plain HTTP, none for the
  // tunnel; `allow execution` covered the second request to again.ask.test (run once); the
  // allow rule never asked.
  const std::string exec = r["execution_id"];
  EXPECT_EQ(asked("yes.ask.test 8080 gate GET /y1 approvals " + exec), 1)
      << slurp(dir_ / "asked.log");
  EXPECT_EQ(asked("no.ask.test 8080 gate GET /n1 approvals"), 1);
  EXPECT_EQ(asked("again.ask.test"), 1) << slurp(dir_ / "asked.log");
  EXPECT_EQ(asked("yes.ask.test 8080 gate None None approvals"), 1);
  EXPECT_EQ(asked("ok.ask.test"), 0);
  EXPECT_EQ(lines(dir_ / "asked.log", "ask.test"), 4);

  // The upstream saw the allowed requests and not the denied one.
  for (const char* p : {" /y1", " /a1", " /a2", " /p1", " /o1"}) EXPECT_EQ(arrived(p), 1) << p;
  EXPECT_EQ(arrived(" /n1"), 0);

  // The receipt names the refusal; the audit store has one row per approval, in the chain.
  EXPECT_TRUE(hasDenial(r, "no.ask.test", "approval_denied")) << r["network"].dump();
  EXPECT_FALSE(hasDenial(r, "yes.ask.test", "approval_denied")) << r["network"].dump();
  const std::string of = "FROM approvals WHERE execution_id = '" + exec + "'";
  // Five rows: the four the command answered, and the second request to again.ask.test, which
  // the remembered answer decided.
  EXPECT_EQ(count("SELECT count(*) " + of), 5);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND host = 'no.ask.test' AND decision = 'deny' AND reason = "
                  "'approval_denied' AND decided_by = 'approve-with' AND method = 'GET' AND path "
                  "= '/n1'"),
            1);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND host = 'again.ask.test' AND decision = 'allow' AND scope = 'execution'"
                  " AND decided_by = 'approve-with' AND path = '/a1'"),
            1);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND host = 'again.ask.test' AND decision = 'allow' AND path = '/a2' AND "
                  "decided_by LIKE 'scope:execution of ap-%'"),
            1);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND host = 'yes.ask.test' AND decision = 'allow' AND method IS NULL AND path "
                  "IS NULL AND rule_id = 'gate'"),
            1);
  auto [vrc, v] = sh(std::string(SLUICE_BINARY) + " audit verify --db " + db());
  EXPECT_EQ(vrc, 0) << v;
}

TEST_F(ApprovalsRun, ACommandThatHangsIsKilledAtTheTimeout) {
  REQUIRE_SANDBOX();
  auto r = run("sh /input/in/req.sh hang http://hang.ask.test:8080/h1\n");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("hang code=403 reason=approval_timeout"), std::string::npos)
      << out << r.dump();
  EXPECT_EQ(arrived(" /h1"), 0);
  EXPECT_EQ(asked("hang.ask.test 8080 gate GET /h1"), 1);
  // The command was killed, not left running.
  const std::string pid = slurp(dir_ / "asked.log.pid");
  ASSERT_FALSE(pid.empty());
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = ::kill(std::stoi(pid), 0) != 0 && errno == ESRCH;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "approver pid " << pid << " still runs";
  EXPECT_TRUE(hasDenial(r, "hang.ask.test", "approval_timeout")) << r["network"].dump();
  EXPECT_EQ(count("SELECT count(*) FROM approvals WHERE host = 'hang.ask.test' AND decision = "
                  "'deny' AND reason = 'approval_timeout'"),
            1);
}

TEST_F(ApprovalsRun, WithoutAnApproverAnAskIsRefusedAtOnce) {
  REQUIRE_SANDBOX();
  auto r =
      run("sh /input/in/req.sh yes http://yes.ask.test:8080/u1\n"
          "sh /input/in/req.sh open http://ok.ask.test:8080/o2\n",
          /*approver=*/false);
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("yes code=403 reason=approval_unavailable"), std::string::npos)
      << out << r.dump();
  EXPECT_NE(out.find("open code=200"), std::string::npos) << out;
  EXPECT_EQ(arrived(" /u1"), 0);
  EXPECT_EQ(arrived(" /o2"), 1);
  EXPECT_TRUE(hasDenial(r, "yes.ask.test", "approval_unavailable")) << r["network"].dump();
}

TEST_F(ApprovalsRun, TransparentCaptureAsksToo) {
  REQUIRE_SANDBOX();
  // No proxy variables: the names resolve through sluice's DNS to synthetic addresses and the
  // connections are redirected to the proxy, which asks at the connection (method/path null).
  auto r =
      run("sh /input/in/req.sh tp-yes --noproxy '*' http://yes.ask.test:8080/t1\n"
          "sh /input/in/req.sh tp-no --noproxy '*' http://no.ask.test:8080/t2\n");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("tp-yes code=200 reason= body=hello /t1"), std::string::npos)
      << out << r.dump();
  EXPECT_EQ(out.find("tp-no code=200"), std::string::npos) << out;
  EXPECT_EQ(arrived(" /t1"), 1);
  EXPECT_EQ(arrived(" /t2"), 0);
  // Asked at the connection, as a tunnel: no method or path.
  EXPECT_EQ(asked("yes.ask.test 8080 gate None None"), 1) << slurp(dir_ / "asked.log");
  EXPECT_EQ(asked("no.ask.test 8080 gate"), 1) << slurp(dir_ / "asked.log");
  EXPECT_TRUE(hasDenial(r, "no.ask.test", "approval_denied")) << r["network"].dump();
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND host = "
                  "'no.ask.test' AND decision = 'deny' AND reason = 'approval_denied'"),
            1);
}

}  // namespace
