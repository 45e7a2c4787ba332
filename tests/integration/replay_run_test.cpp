// `sluice policy replay` and `sluice policy learn` on real runs: `sluice run` of a program that
// makes requests through every path of the proxy's pipeline (plain HTTP on fresh and kept-alive
// connections, pipelined, plain HTTP inside a CONNECT tunnel, inspected TLS) to loopback
// upstreams started here, then:
// - replaying the execution against the policy it ran under reports no change for any row;
// - a tightened candidate reports exactly the expected allow->deny lines (exit 1), and its
//   --json output validates against schemas/replay.v1.schema.json;
// - a broken candidate exits 2 naming FILE:LINE:COL;
// - learn -> policy check (no warning) -> replay of the learned policy: no allow->deny;
// - the same round trip with a real `npm install` (skipped when the host's registry is
//   unreachable and CI is not set), and under an allow-all learn run: learn -> check ->
//   replay -> a normal run of the install under the learned policy.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host_registries.hpp"
#include "https_upstream.hpp"
#include "isolation.hpp"
#include "proc_scan.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sluice::testing::Outcome;
using sluice::testing::slurp;

// An HTTP/1.1 upstream (keep-alive) on 127.0.0.1, TLS when given a certificate and key.
constexpr const char* kUpstreamPy = R"PY(
import http.server, json, os, ssl, sys
portfile = sys.argv[1]
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = (json.dumps({"method": self.command, "path": self.path}) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_DELETE = answer
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
with open(portfile + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(portfile + ".tmp", portfile)
server.serve_forever()
)PY";

// The program in the sandbox: one request per pipeline path; prints each status.
constexpr const char* kAgentSh = R"SH(
P=$PLAIN_PORT T=$TLS_PORT
c() { curl -sS -o /dev/null -w '%{http_code}\n' --max-time 20 "$@"; }
c http://localhost:$P/v1/items/123
c http://localhost:$P/v1/items/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
c -o /dev/null http://localhost:$P/v1/items/1 http://localhost:$P/v1/items/2
c -X POST -d x http://localhost:$P/v1/orders
c -p http://localhost:$P/v1/items/77
c https://localhost:$T/v1/items/42
c -o /dev/null https://localhost:$T/v1/items/43 https://localhost:$T/v1/items/44
c http://localhost:$P/admin
c -X DELETE https://localhost:$T/v1/items/1
python3 - <<'PY'
import os, socket
proxy = (os.environ.get("http_proxy") or os.environ["HTTP_PROXY"]).split("://")[-1].rstrip("/")
host, port = proxy.rsplit(":", 1)
p = os.environ["PLAIN_PORT"]
s = socket.create_connection((host, int(port)), timeout=20)
req = "GET http://localhost:%s/v1/items/%d HTTP/1.1\r\nHost: localhost:%s\r\n%s\r\n"
s.sendall(((req % (p, 7, p, "")) + (req % (p, 8, p, "Connection: close\r\n"))).encode())
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
print("pipelined", data.count(b"HTTP/1.1 200"))
PY
)SH";

// The host's npm registry (npm's own configuration names it), or the test is skipped (failed
// where isolation is required or in CI).
#define REQUIRE_NPM_REGISTRY(reg)                                                              \
  do {                                                                                         \
    if (std::system("command -v npm >/dev/null 2>&1") != 0) {                                  \
      if (isolationRequired()) FAIL() << "npm missing (scripts/install-deps.sh installs it)";  \
      GTEST_SKIP() << "npm not installed";                                                     \
    }                                                                                          \
    if (const std::string why_ = sluice::testing::hostNpmRegistry(dir_, reg); !why_.empty()) { \
      if (isolationRequired()) FAIL() << why_;                                                 \
      GTEST_SKIP() << why_;                                                                    \
    }                                                                                          \
  } while (0)

class ReplayRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-replay-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "upstream.py") << kUpstreamPy;
    std::ofstream(dir_ / "agent.sh") << kAgentSh;
  }
  void TearDown() override {
    for (pid_t pid : upstreams_) {
      ::kill(pid, SIGTERM);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
    if (const char* keep = std::getenv("SLUICE_TEST_KEEP"); !keep || std::string(keep) != "1")
      fs::remove_all(dir_);
  }

  std::string startUpstream(const std::string& name, bool tls) {
    std::vector<std::string> args = {(dir_ / "upstream.py").string(),
                                     (dir_ / (name + ".port")).string()};
    if (tls)
      args.insert(args.end(), {(dir_ / "server.pem").string(), (dir_ / "server.key").string()});
    std::string port;
    const pid_t pid =
        sluice::testing::startPythonUpstream(dir_, args, dir_ / (name + ".port"), port);
    if (pid > 0) upstreams_.push_back(pid);
    return port;
  }

  // The policy the run goes under, with `plain_paths` for the plain-HTTP API.
  std::string policy(const std::string& file, const std::string& plain_paths) {
    const std::string loopback =
        "      cidrs: [\"127.0.0.0/8\", \"::1/128\"]\n      allow_private: true\n";
    std::ofstream(dir_ / file) << "apiVersion: sluice/v1\nkind: Workflow\nname: history\n"
                                  "sandbox:\n  timeout: 120s\n  cpu_time: 60s\n"
                                  "egress:\n  rules:\n"
                                  "    - id: plain-api\n      action: allow\n"
                                  "      hosts: [localhost]\n      ports: ["
                               << plain_ << "]\n"
                               << loopback << "      methods: [GET, POST]\n      paths: ["
                               << plain_paths
                               << "]\n"
                                  "    - id: tls-api\n      action: allow\n"
                                  "      hosts: [localhost]\n      ports: ["
                               << tls_ << "]\n"
                               << loopback
                               << "      tls: inspect\n      methods: [GET]\n"
                                  "      paths: [\"/v1/*\"]\n";
    return (dir_ / file).string();
  }

  Outcome sluice(const std::vector<std::string>& args) {
    return sluice::testing::runBinary(SLUICE_BINARY, dir_, args);
  }

  std::string db() const { return (dir_ / "audit.db").string(); }
  /// `npm install is-number@7.0.0` from `registry` in `sluice run --policy policy EXTRA...`,
  /// then the package used (prints "true").
  Outcome npmInstall(const std::string& policy, const std::string& registry,
                     const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"run",
                                     "--policy",
                                     policy,
                                     "--audit",
                                     db(),
                                     "--env",
                                     "npm_config_registry=" + registry,
                                     "--env",
                                     "npm_config_update_notifier=false",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "sh", "-c",
                             "cd /tmp && npm init -y >/dev/null && npm install --no-audit "
                             "--no-fund --loglevel=error is-number@7.0.0 >&2 && node -e "
                             "'console.log(require(\"is-number\")(7))'"});
    return sluice(args);
  }

  // `sluice run` of the agent; the execution id.
  std::string runAgent(const std::string& policy_file) {
    return runAgentWith(policy_file, {},
                        "200\n200\n200\n200\n200\n200\n200\n200\n200\n403\n403\npipelined 2\n")
        .value("execution_id", std::string());
  }

  // `sluice run` of the agent with `extra` flags; the receipt. `statuses`: what it prints.
  json runAgentWith(const std::string& policy_file, const std::vector<std::string>& extra,
                    const std::string& statuses, std::string* err = nullptr) {
    std::vector<std::string> args = {"run",
                                     "--policy",
                                     policy_file,
                                     "--audit",
                                     db(),
                                     "--upstream-ca",
                                     (dir_ / "ca.pem").string(),
                                     "--env",
                                     "PLAIN_PORT=" + plain_,
                                     "--env",
                                     "TLS_PORT=" + tls_,
                                     "--input",
                                     (dir_ / "agent.sh").string() + ":agent.sh",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "sh", "/input/agent.sh"});
    Outcome o = sluice(args);
    EXPECT_EQ(o.status, 0) << o.out << o.err;
    if (err) *err = o.err;
    auto receipt = sluice::testing::parseReceipt(o.out);
    EXPECT_EQ(receipt.value("/stdout/text"_json_pointer, std::string()), statuses)
        << o.out << o.err;
    return receipt;
  }

  json replayJson(const std::string& execution, const std::string& candidate, int expect_rc) {
    Outcome o = sluice({"policy", "replay", "--db", db(), "--execution", execution, "--policy",
                        candidate, "--json"});
    EXPECT_EQ(o.status, expect_rc) << o.out << o.err;
    std::ofstream(dir_ / "replay.json") << o.out;
    // The schema check needs python3-jsonschema (scripts/install-deps.sh); CI always has it.
    if (std::system("python3 -c 'import jsonschema' 2>/dev/null") != 0) {
      if (isolationRequired()) ADD_FAILURE() << "python3-jsonschema is missing";
      RecordProperty("schema_check", "skipped: python3-jsonschema not installed");
      return json::parse(o.out, nullptr, false);
    }
    const std::string check =
        "python3 -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
        "json.load(open(sys.argv[2])))' " +
        (dir_ / "replay.json").string() + " " SLUICE_SOURCE_DIR "/schemas/replay.v1.schema.json";
    EXPECT_EQ(std::system(check.c_str()), 0) << o.out;
    return json::parse(o.out, nullptr, false);
  }

  long count(const std::string& q) { return sluice::testing::auditCount(db(), q); }

  fs::path dir_;
  std::vector<pid_t> upstreams_;
  std::string plain_, tls_;
};

TEST_F(ReplayRun, EveryPipelinePathReplaysUnchangedAndATightenedPolicyShowsItsDenials) {
  REQUIRE_SANDBOX();
  ASSERT_EQ(sluice::testing::makeUpstreamCertificates(dir_), "") << slurp(dir_ / "certs.log");
  plain_ = startUpstream("plain", false);
  tls_ = startUpstream("tls", true);
  ASSERT_FALSE(plain_.empty() || tls_.empty()) << slurp(dir_ / "upstream.stderr");
  const std::string ran_under = policy("history.yaml", "\"/v1/*\"");
  const std::string exec = runAgent(ran_under);
  ASSERT_FALSE(exec.empty());
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  ASSERT_EQ(count("SELECT count(*) FROM requests" + in_exec), 13);

  // Against the policy it ran under: every request, and every tunnel, decided as recorded.
  json same = replayJson(exec, ran_under, 0);
  EXPECT_EQ(same["counts"]["requests"], 13) << same.dump(1);
  EXPECT_EQ(same["counts"]["connections"],
            count("SELECT count(*) FROM connections" + in_exec + " AND kind = 'connect'"));
  EXPECT_EQ(same["counts"]["not_compared"],
            count("SELECT count(*) FROM connections" + in_exec + " AND kind = 'http'"));
  EXPECT_EQ(same["differences"].size(), 0u) << same.dump(1);

  // Tightened: the plain API only for items. Exactly the POST /v1/orders is now refused.
  json tight = replayJson(exec, policy("tight.yaml", "\"/v1/items/*\""), 1);
  ASSERT_EQ(tight["differences"].size(), 1u) << tight.dump(1);
  const json& d = tight["differences"][0];
  EXPECT_EQ(d["change"], "allow->deny");
  EXPECT_EQ(d["method"], "POST");
  EXPECT_EQ(d["path"], "/v1/orders");
  EXPECT_EQ(d["port"], std::stoi(plain_));
  EXPECT_EQ(d["execution_id"], exec);
  EXPECT_EQ(d["after"]["reason"], "path_not_allowed");
  EXPECT_NE(d["nearest_miss"].get<std::string>().find("/v1/orders"), std::string::npos);
  Outcome text = sluice({"policy", "replay", "--db", db(), "--execution", exec, "--policy",
                         (dir_ / "tight.yaml").string()});
  EXPECT_EQ(text.status, 1);
  EXPECT_NE(text.out.find("allow->deny  request"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("POST localhost:" + plain_ + "/v1/orders"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("1 changed (1 allow->deny"), std::string::npos) << text.out;

  // Broken: a typo is an error (2) at its line and column, not a report.
  std::ofstream(dir_ / "broken.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: history\negress:\n  rules:\n"
         "    - id: a\n      action: allow\n      hots: [localhost]\n";
  Outcome broken = sluice({"policy", "replay", "--db", db(), "--execution", exec, "--policy",
                           (dir_ / "broken.yaml").string()});
  EXPECT_EQ(broken.status, 2);
  EXPECT_NE(broken.err.find("broken.yaml:8:7"), std::string::npos) << broken.err;
  Outcome no_db =
      sluice({"policy", "replay", "--db", (dir_ / "none.db").string(), "--policy", ran_under});
  EXPECT_EQ(no_db.status, 2) << no_db.out;
  Outcome no_exec = sluice(
      {"policy", "replay", "--db", db(), "--execution", "no-such-exec", "--policy", ran_under});
  EXPECT_EQ(no_exec.status, 2) << no_exec.out;
  EXPECT_NE(no_exec.err.find("no execution 'no-such-exec'"), std::string::npos) << no_exec.err;

  // Learn -> check -> replay: the learned policy refuses nothing the run did.
  Outcome learned =
      sluice({"policy", "learn", "--db", db(), "--execution", exec, "--name", "history-learned"});
  ASSERT_EQ(learned.status, 0) << learned.err;
  std::ofstream(dir_ / "learned.yaml") << learned.out;
  EXPECT_NE(learned.out.find("\"/v1/items/*\""), std::string::npos) << learned.out;
  EXPECT_NE(learned.out.find("\"/v1/orders\""), std::string::npos) << learned.out;
  EXPECT_EQ(learned.out.find("/admin"), std::string::npos) << learned.out;
  EXPECT_NE(learned.out.find("tls: inspect"), std::string::npos) << learned.out;
  Outcome check = sluice({"policy", "check", (dir_ / "learned.yaml").string()});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_EQ(check.out.find("warning"), std::string::npos) << check.out;
  json back = replayJson(exec, (dir_ / "learned.yaml").string(), 1);  // rule names differ
  EXPECT_EQ(back["counts"]["allow_to_deny"], 0) << back.dump(1);
  EXPECT_EQ(back["counts"]["deny_to_allow"], 0) << back.dump(1);
  EXPECT_EQ(back["counts"]["requests"], 13);
}

TEST_F(ReplayRun, NpmInstallLearnCheckReplay) {
  REQUIRE_SANDBOX();
  sluice::testing::NpmRegistry reg;
  REQUIRE_NPM_REGISTRY(reg);
  std::ofstream(dir_ / "npm.yaml") << "apiVersion: sluice/v1\nkind: Workflow\nname: npm\n"
                                      "sandbox:\n  timeout: 180s\n  cpu_time: 120s\n"
                                      "egress:\n  rules:\n"
                                   << sluice::testing::npmRegistryRule(reg, dir_);
  Outcome o = npmInstall((dir_ / "npm.yaml").string(), reg.url);
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string exec = sluice::testing::parseReceipt(o.out).value("execution_id", "");
  ASSERT_FALSE(exec.empty());
  Outcome learned = sluice({"policy", "learn", "--db", db(), "--execution", exec});
  ASSERT_EQ(learned.status, 0) << learned.err;
  std::ofstream(dir_ / "learned.yaml") << learned.out;
  Outcome check = sluice({"policy", "check", (dir_ / "learned.yaml").string()});
  EXPECT_EQ(check.status, 0) << check.out << learned.out;
  EXPECT_EQ(check.out.find("warning"), std::string::npos) << check.out;
  json back = replayJson(exec, (dir_ / "learned.yaml").string(), 1);  // rule names differ
  EXPECT_EQ(back["counts"]["allow_to_deny"], 0) << back.dump(1) << learned.out;
  EXPECT_GT(back["counts"]["connections"].get<int>(), 0) << back.dump(1);
}

// The same npm install under an allow-all learn run: a workflow whose rules allow nothing npm
// does (at most one rule for the registry on an unused port, vouching for its addresses where
// this machine reaches it at a non-global one: learn mode's SSRF guard lets a private address
// through only under such a rule). Everything goes through as would_deny; the policy learned
// from it passes check, replays as only deny->allow (learn mode) lines, and a normal run of the
// install under it succeeds.
TEST_F(ReplayRun, NpmInstallUnderAnAllowAllLearnRunLearnsAPolicyANormalRunPassesUnder) {
  REQUIRE_SANDBOX();
  sluice::testing::NpmRegistry reg;
  REQUIRE_NPM_REGISTRY(reg);
  const std::string unused_port = reg.port == "1" ? "2" : "1";
  std::ofstream(dir_ / "nothing.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: npm\n"
         "sandbox:\n  timeout: 180s\n  cpu_time: 120s\negress:\n  rules:\n"
      << sluice::testing::reachableRule(
             "    - id: registry-addresses\n      action: allow\n"
             "      hosts: [\"" +
                 reg.host + "\"]\n      ports: [" + unused_port + "]\n",
             reg.host, unused_port, dir_);
  auto install = [&](const std::string& policy, const std::vector<std::string>& extra) {
    Outcome o = npmInstall(policy, reg.url, extra);
    EXPECT_EQ(o.status, 0) << o.err;
    json receipt = sluice::testing::parseReceipt(o.out);
    EXPECT_EQ(receipt.value("/stdout/text"_json_pointer, std::string()), "true\n") << o.err;
    return receipt;
  };
  json learning = install((dir_ / "nothing.yaml").string(), {"--learn"});
  EXPECT_EQ(learning.value("mode", std::string()), "learn") << learning.dump(1);
  EXPECT_GT(learning["network"].value("would_deny", 0), 0) << learning.dump(1);
  const std::string exec = learning.value("execution_id", std::string());
  ASSERT_FALSE(exec.empty());
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  EXPECT_EQ(count("SELECT count(*) FROM connections" + in_exec +
                  " AND kind = 'connect' AND decision <> 'would_deny'"),
            0);
  Outcome learned = sluice({"policy", "learn", "--db", db(), "--execution", exec});
  ASSERT_EQ(learned.status, 0) << learned.err;
  std::ofstream(dir_ / "learned.yaml") << learned.out;
  Outcome check = sluice({"policy", "check", (dir_ / "learned.yaml").string()});
  EXPECT_EQ(check.status, 0) << check.out << learned.out;
  EXPECT_EQ(check.out.find("warning"), std::string::npos) << check.out;
  // Every row went through only because of learn mode: replayed against the learned policy,
  // each is deny->allow with the learn-mode note, and nothing else changes.
  json back = replayJson(exec, (dir_ / "learned.yaml").string(), 1);
  EXPECT_EQ(back["counts"]["allow_to_deny"], 0) << back.dump(1) << learned.out;
  EXPECT_GT(back["counts"]["deny_to_allow"].get<int>(), 0) << back.dump(1);
  for (const auto& d : back["differences"]) {
    EXPECT_EQ(d["change"], "deny->allow") << d.dump();
    EXPECT_NE(d.value("note", std::string()).find("learn mode"), std::string::npos) << d.dump();
  }
  json normal = install((dir_ / "learned.yaml").string(), {});
  EXPECT_EQ(normal.value("mode", std::string("enforce")), "enforce") << normal.dump(1);
  const std::string second = normal.value("execution_id", std::string());
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE execution_id = '" + second +
                  "' AND decision <> 'allow'"),
            0);
}

// --shadow-policy on every pipeline path: the candidate (items only) disagrees with the live
// policy (/v1/*) on exactly the POST /v1/orders request (and the plain-HTTP origin connection
// opened for it, which that request decided); the traffic is what the live policy decides;
// `audit query --shadow-diff` lists exactly those two rows.
TEST_F(ReplayRun, AShadowPolicyIsRecordedOnEveryPathAndShadowDiffListsItsDisagreements) {
  REQUIRE_SANDBOX();
  ASSERT_EQ(sluice::testing::makeUpstreamCertificates(dir_), "") << slurp(dir_ / "certs.log");
  plain_ = startUpstream("plain", false);
  tls_ = startUpstream("tls", true);
  ASSERT_FALSE(plain_.empty() || tls_.empty()) << slurp(dir_ / "upstream.stderr");
  const std::string live = policy("history.yaml", "\"/v1/*\"");
  const std::string candidate = policy("tight.yaml", "\"/v1/items/*\"");
  json receipt =
      runAgentWith(live, {"--shadow-policy", candidate},
                   "200\n200\n200\n200\n200\n200\n200\n200\n200\n403\n403\npipelined 2\n");
  const std::string exec = receipt.value("execution_id", std::string());
  ASSERT_FALSE(exec.empty());
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  // Every request, tunnel and plain-HTTP origin connection has a shadow decision.
  EXPECT_EQ(count("SELECT count(*) FROM requests" + in_exec + " AND shadow_decision IS NULL"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM connections" + in_exec + " AND shadow_decision IS NULL"),
            0);
  EXPECT_GT(count("SELECT count(*) FROM connections" + in_exec + " AND kind = 'connect'"), 0);
  Outcome diff = sluice(
      {"audit", "query", "--db", db(), "--execution", exec, "--shadow-diff", "--format", "json"});
  ASSERT_EQ(diff.status, 0) << diff.err;
  json rows = json::parse(diff.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << diff.out;
  ASSERT_EQ(rows.size(), 2u) << diff.out;
  for (const json& row : rows) {
    EXPECT_EQ(row["decision"], "allow") << row.dump();
    EXPECT_EQ(row["shadow_decision"], "deny") << row.dump();
    EXPECT_EQ(row["shadow_rule"], "plain-api") << row.dump();
  }
  const bool request_first = rows[0]["type"] == "request";
  const json& req = rows[request_first ? 0 : 1];
  const json& origin = rows[request_first ? 1 : 0];
  EXPECT_EQ(req["type"], "request");
  EXPECT_EQ(req["method"], "POST");
  EXPECT_EQ(req["path"], "/v1/orders");
  EXPECT_EQ(origin["type"], "connection");
  EXPECT_EQ(origin["port"], std::stoi(plain_));
  // The same candidate replayed offline finds the same request (replay compares the requests
  // an origin connection carried, not the connection).
  json replayed = replayJson(exec, candidate, 1);
  EXPECT_EQ(replayed["differences"].size(), 1u) << replayed.dump(1);
}

// sluice run --learn under a policy that allows only GET /v1/items/* (and explicitly denies
// /admin): the rest goes through as would_deny, the deny rule still denies; the receipt and the
// summary say mode: learn; learn -> check -> replay shows the would_deny rows as deny->allow and
// nothing else.
TEST_F(ReplayRun, LearnModeLetsThroughWhatNoRuleDeniesAndRoundTripsThroughLearnAndReplay) {
  REQUIRE_SANDBOX();
  ASSERT_EQ(sluice::testing::makeUpstreamCertificates(dir_), "") << slurp(dir_ / "certs.log");
  plain_ = startUpstream("plain", false);
  tls_ = startUpstream("tls", true);
  ASSERT_FALSE(plain_.empty() || tls_.empty()) << slurp(dir_ / "upstream.stderr");
  const std::string narrow = policy("narrow.yaml", "\"/v1/items/*\"");
  std::ofstream(narrow, std::ios::app) << "    - id: no-admin\n      action: deny\n"
                                          "      hosts: [localhost]\n      paths: [\"/admin\"]\n"
                                          "      ports: [\"1-65535\"]\n";
  std::string err;
  json receipt =
      runAgentWith(narrow, {"--learn"},
                   "200\n200\n200\n200\n200\n200\n200\n200\n200\n403\n200\npipelined 2\n", &err);
  EXPECT_EQ(receipt.value("mode", std::string()), "learn") << receipt.dump(1);
  EXPECT_EQ(receipt["network"].value("would_deny", 0), 2) << receipt.dump(1);
  EXPECT_NE(err.find("mode: learn"), std::string::npos) << err;
  EXPECT_NE(err.find("mode: learn"), err.rfind("mode: learn")) << "said at start and end: " << err;
  const std::string exec = receipt.value("execution_id", std::string());
  ASSERT_FALSE(exec.empty());
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  EXPECT_EQ(count("SELECT count(*) FROM requests" + in_exec + " AND decision = 'would_deny'"), 2);
  EXPECT_EQ(count("SELECT count(*) FROM requests" + in_exec +
                  " AND decision = 'would_deny' AND path = '/v1/orders'"
                  " AND reason = 'path_not_allowed' AND rule_id = 'plain-api'"),
            1);
  EXPECT_EQ(count("SELECT count(*) FROM requests" + in_exec +
                  " AND decision = 'deny' AND path = '/admin' AND rule_id = 'no-admin'"),
            1);
  Outcome learned = sluice({"policy", "learn", "--db", db(), "--execution", exec});
  ASSERT_EQ(learned.status, 0) << learned.err;
  std::ofstream(dir_ / "learned.yaml") << learned.out;
  EXPECT_EQ(learned.out.find("/admin"), std::string::npos) << learned.out;
  Outcome check = sluice({"policy", "check", (dir_ / "learned.yaml").string()});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_EQ(check.out.find("warning"), std::string::npos) << check.out;
  json back = replayJson(exec, (dir_ / "learned.yaml").string(), 1);
  EXPECT_EQ(back["counts"]["allow_to_deny"], 0) << back.dump(1);
  int would_deny_rows = 0;
  for (const auto& d : back["differences"]) {
    if (d["change"] == "deny->allow") {
      ++would_deny_rows;
      EXPECT_NE(d.value("note", std::string()).find("learn mode"), std::string::npos) << d.dump();
    }
  }
  EXPECT_EQ(back["counts"]["deny_to_allow"], would_deny_rows);
  EXPECT_GE(would_deny_rows, 2) << back.dump(1);
}

}  // namespace
