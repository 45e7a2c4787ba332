// AWS SigV4 re-signing end to end (inject.aws_sigv4): `sluice run` with the real key in
// --secrets, and inside it the aws CLI (list, put, a 6 MiB put, get, a presigned GET), the AWS
// SDK for JavaScript (put, get) and hand-made requests signed with botocore (kept-alive and
// fresh connections, a 72 MiB streaming aws-chunked upload, a tampered one), against an S3-like
// HTTPS upstream on 127.0.0.1 that checks every signature with botocore's own signer and the REAL
// key (tests/integration/sigv4/upstream.py). The real key must never be readable in the sandbox.
// The same with transparent capture: the aws CLI and botocore with no proxy variables, reaching
// the upstream by a name sluice's DNS answers (tests/integration/sigv4/transparent.sh).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "https_upstream.hpp"
#include "isolation.hpp"
#include "proc_scan.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using sluice::testing::Outcome;
using sluice::testing::randomText;
using sluice::testing::slurp;

bool toolsPresent(std::string* missing) {
  for (const char* t :
       {"/usr/bin/openssl", "/usr/bin/curl", "/usr/bin/python3", "/usr/bin/aws", "/usr/bin/node"})
    if (::access(t, X_OK) != 0) {
      *missing = t;
      return false;
    }
  const fs::path sdk = fs::path(SLUICE_SOURCE_DIR) / "tests/proxy/clients/node_modules/@aws-sdk";
  if (!fs::exists(sdk)) {
    *missing = sdk.string() + " (the proxy.npm_ci fixture)";
    return false;
  }
  return true;
}

// The name the transparent test's sandbox uses; only sluice's own /etc/hosts maps it (to
// 127.0.0.1, see withHosts), the sandbox gets a synthetic address for it.
constexpr const char* kTransparentHost = "s3.sigv4.test";

class SigV4Run : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sluice-sigv4-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "policies");
    fs::create_directories(dir_ / "out");
    id_ = "AKIA" + randomText(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
    secret_ = randomText(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789");
    token_ = "FwoGZXIvYXdzE" + randomText(60, "abcdefghijklmnopqrstuvwxyz0123456789");
  }
  void TearDown() override {
    if (upstream_ > 0) {
      ::kill(upstream_, SIGTERM);
      int st = 0;
      ::waitpid(upstream_, &st, 0);
    }
    if (const char* keep = std::getenv("SLUICE_TEST_KEEP"); !keep || std::string(keep) != "1")
      fs::remove_all(dir_);
  }

  bool sh(const std::string& cmd) {
    return std::system(("(" + cmd + ") >>" + (dir_ / "sh.log").string() + " 2>&1").c_str()) == 0;
  }

  // A test CA and a server certificate for localhost / 127.0.0.1 / ::1 signed by it.
  void makeCertificates() {
    const std::string failed = sluice::testing::makeUpstreamCertificates(dir_, kTransparentHost);
    ASSERT_EQ(failed, "") << slurp(dir_ / "certs.log");
  }

  void startUpstream() {
    makeCertificates();
    if (HasFatalFailure()) return;
    const fs::path portfile = dir_ / "upstream.port";
    const std::string src = SLUICE_SOURCE_DIR;
    upstream_ = sluice::testing::startPythonUpstream(
        dir_,
        {src + "/tests/integration/sigv4/upstream.py", (dir_ / "server.pem").string(),
         (dir_ / "server.key").string(), portfile.string(), (dir_ / "upstream.log").string(),
         src + "/tests/proxy", id_, secret_, token_},
        portfile, port_);
    ASSERT_GT(upstream_, 0);
    ASSERT_FALSE(port_.empty()) << "upstream did not start: " << slurp(dir_ / "upstream.stderr");
  }

  void writePolicyAndSecrets(const std::string& host = "localhost") {
    std::ofstream(dir_ / "policies" / "s3.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: s3\n"
           "sandbox:\n  timeout: 300s\n  memory: 1GiB\n  pids: 256\n  output: 64MiB\n"
           "  disk: 256MiB\n  network: proxy\n"
           "  mounts:\n    - {source: " SLUICE_SOURCE_DIR
           "/tests/proxy/clients, target: /opt/clients}\n"
           "egress:\n  rules:\n"
           "    - id: s3\n      action: allow\n      hosts: ["
        << host << "]\n      ports: [" << port_
        << "]\n      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n      tls: inspect\n"
           "      inject:\n        aws_sigv4:\n"
           "          access_key_id: ${secret:aws_id}\n"
           "          secret_access_key: ${secret:aws_key}\n"
           "          session_token: ${secret:aws_token}\n"
           "  limits:\n    max_bytes_out: 256MiB\n    max_bytes_in: 256MiB\n";
    const fs::path p = dir_ / "secrets.yaml";
    std::ofstream(p) << "aws_id: {value: \"" << id_ << "\"}\naws_key: {value: \"" << secret_
                     << "\"}\naws_token: {value: \"" << token_ << "\"}\n";
    ::chmod(p.c_str(), 0600);
  }

  // `sluice run` of the s3 workflow with this fixture's policies, audit store, secrets, upstream
  // CA and port; the caller adds its inputs, outputs and command.
  std::vector<std::string> runArgs() const {
    return {"run",
            "--workflow",
            "s3",
            "--policy-dir",
            (dir_ / "policies").string(),
            "--audit",
            (dir_ / "audit.db").string(),
            "--secrets",
            (dir_ / "secrets.yaml").string(),
            "--upstream-ca",
            (dir_ / "ca.pem").string(),
            "--env",
            "UPSTREAM_PORT=" + port_};
  }

  Outcome runAgent() {
    const std::string src = SLUICE_SOURCE_DIR;
    std::vector<std::string> a = runArgs();
    a.insert(a.end(), {"--input", src + "/tests/integration/sigv4/agent.py:agent.py", "--input",
                       src + "/tests/integration/sigv4/s3sdk.mjs:s3sdk.mjs", "--output-dir",
                       (dir_ / "out").string(), "--receipt", (dir_ / "receipt.json").string(),
                       "--json", "--", "python3", "/input/agent.py"});
    return sluice::testing::runBinary(SLUICE_BINARY, dir_, a, {"SLUICE_LOG_LEVEL=debug"});
  }

  // transparent.sh under `sluice run`, in a mount namespace whose /etc/hosts maps
  // kTransparentHost to 127.0.0.1 for the proxy's own resolver (nothing of the host changes).
  Outcome runTransparent() {
    const std::string src = SLUICE_SOURCE_DIR;
    const std::string prefix =
        sluice::testing::withHosts(dir_, std::string("127.0.0.1 ") + kTransparentHost);
    std::vector<std::string> a = {"-m", "--propagation", "private",
                                  (dir_ / "with-hosts.sh").string(), SLUICE_BINARY};
    const auto run = runArgs();
    a.insert(a.end(), run.begin(), run.end());
    a.insert(a.end(), {"--input", src + "/tests/integration/sigv4/transparent.sh:transparent.sh",
                       "--input", src + "/tests/proxy/sigv4_stream_client.py:client.py", "--",
                       "/bin/sh", "/input/transparent.sh"});
    return sluice::testing::runBinary("/usr/bin/unshare", dir_, a);
  }

  // The upstream's log: one JSON object per request it received.
  std::vector<json> upstreamLog() {
    std::vector<json> out;
    std::ifstream in(dir_ / "upstream.log");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) out.push_back(j);
    }
    return out;
  }

  // Where the real key, secret or token can be read after the run: the sandbox's dumps (its
  // environment, /work, /tmp), the receipt, sluice's output, the audit database.
  std::vector<std::string> leaks(const Outcome& o) {
    return sluice::testing::whereFound({secret_, token_}, o, dir_);
  }

  // The upstream: every request it got carried the real key's signature; none of the refused
  // ones reached it; the streaming upload arrived whole and verified chunk by chunk.
  void expectUpstreamSawOnlyTheRealKey() {
    int streamed = 0;
    for (const json& e : upstreamLog()) {
      const std::string path = e.value("path", "");
      EXPECT_EQ(path.find("wrongbucket"), std::string::npos) << e.dump();
      if (path.starts_with("/bucket/tampered.bin")) {
        EXPECT_FALSE(e.value("ok", true)) << e.dump();
        continue;
      }
      EXPECT_TRUE(e.value("ok", false)) << e.dump();
      if (e.value("streaming", false) && e.value("ok", false)) {
        ++streamed;
        EXPECT_EQ(e.value("size", 0), 72 << 20);  // over the proxy's default body limit
      }
    }
    EXPECT_EQ(streamed, 1);
  }

  // The audit store: refusals with signature_mismatch; the secret names on allowed rows.
  void expectAuditRows() {
    const std::string db = (dir_ / "audit.db").string();
    EXPECT_GE(sluice::testing::auditCount(
                  db,
                  "SELECT count(*) FROM requests WHERE reason='signature_mismatch' AND "
                  "status=403"),
              4);
    EXPECT_GE(sluice::testing::auditCount(
                  db,
                  "SELECT count(*) FROM requests WHERE decision='allow' AND status=200 AND "
                  "injected_secrets LIKE '%aws_key%'"),
              8);
  }

  fs::path dir_;
  std::string id_, secret_, token_, port_;
  pid_t upstream_ = -1;
};

std::string show(const json& j) { return j.dump(1); }

TEST_F(SigV4Run, RealClientsAreSignedAgainWithTheRealKeyWhichNeverReachesTheSandbox) {
  REQUIRE_SANDBOX();
  std::string missing;
  if (!toolsPresent(&missing)) {
    if (isolationRequired()) FAIL() << "required tool missing: " << missing;
    GTEST_SKIP() << "tool missing: " << missing;
  }
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicyAndSecrets();
  Outcome o = runAgent();
  ASSERT_EQ(o.status, 0) << o.err.substr(o.err.size() > 8000 ? o.err.size() - 8000 : 0) << "\n"
                         << o.out << "\nupstream: " << slurp(dir_ / "upstream.stderr");
  json r = json::parse(slurp(dir_ / "out" / "results.json"), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << o.err;

  // The sandbox has placeholders shaped like AWS keys, and the CA in AWS_CA_BUNDLE.
  const std::string placeholder_id = r["env"].value("AWS_ACCESS_KEY_ID", "");
  EXPECT_TRUE(placeholder_id.starts_with("AKIA") && placeholder_id.size() == 20) << placeholder_id;
  EXPECT_NE(placeholder_id, id_);
  EXPECT_EQ(r["env"]["AWS_CA_BUNDLE"], "/etc/ssl/certs/ca-certificates.crt");
  EXPECT_TRUE(r["has_secret_var"]);
  EXPECT_TRUE(r["has_token_var"]);

  // The aws CLI: put (small and 6 MiB), list, get, a presigned GET.
  for (const char* step : {"put_small", "put_big", "ls", "get", "get_big", "presign"})
    EXPECT_EQ(r[step].value("rc", -1), 0) << step << ": " << show(r[step]);
  EXPECT_NE(r["ls"].value("out", "").find("small.txt"), std::string::npos) << show(r["ls"]);
  EXPECT_NE(r["ls"].value("out", "").find("big.bin"), std::string::npos) << show(r["ls"]);
  EXPECT_TRUE(r["get_same"]);
  EXPECT_TRUE(r["get_big_same"]);
  EXPECT_NE(r["presign"].value("out", "").find("X-Amz-Signature="), std::string::npos);
  EXPECT_EQ(r["presigned_get"].value("out", ""), "hello from the sandbox\n\n200")
      << show(r["presigned_get"]);
  // The JavaScript SDK: put and get.
  json node = json::parse(r["node"].value("out", ""), nullptr, false);
  ASSERT_FALSE(node.is_discarded()) << show(r["node"]);
  EXPECT_EQ(node.value("put", 0), 200) << show(r["node"]);
  EXPECT_EQ(node.value("get_same", false), true) << show(r["node"]);
  // STS: a body signed without x-amz-content-sha256.
  EXPECT_EQ(r["sts"].value("rc", -1), 0) << show(r["sts"]);
  EXPECT_NE(r["sts"].value("out", "").find("123456789012"), std::string::npos) << show(r["sts"]);
  // A streaming upload, its chunks signed again on the fly.
  EXPECT_EQ(r["stream_put"].value("status", 0), 200) << show(r["stream_put"]);

  // Signed with another key: refused before it left, on a kept-alive connection (after an
  // allowed request) and on a fresh one, and for the aws CLI.
  EXPECT_EQ(r["keepalive_good"].value("status", 0), 200) << show(r["keepalive_good"]);
  for (const char* step : {"keepalive_wrong", "fresh_wrong"}) {
    EXPECT_EQ(r[step].value("status", 0), 403) << step << ": " << show(r[step]);
    EXPECT_EQ(r[step].value("reason", ""), "signature_mismatch") << step;
  }
  EXPECT_NE(r["wrong_key"].value("rc", 0), 0) << show(r["wrong_key"]);
  // Pipelined on one tunnel: the first answered, the second refused, the connection closed.
  const std::string piped = r.value("pipelined", "");
  EXPECT_TRUE(piped.starts_with("HTTP/1.1 200 ")) << piped;
  EXPECT_NE(piped.find("HTTP/1.1 403 "), std::string::npos) << piped;
  EXPECT_NE(piped.find("X-Sluice-Reason: signature_mismatch"), std::string::npos) << piped;
  EXPECT_EQ(piped.find("HTTP/1.1 200 ", 1), std::string::npos) << piped;
  // A tampered chunk: the upload is cut off, never completed upstream.
  EXPECT_NE(r["stream_tampered"].value("status", 0), 200) << show(r["stream_tampered"]);

  expectUpstreamSawOnlyTheRealKey();
  expectAuditRows();
  for (const auto& where : leaks(o)) ADD_FAILURE() << "the real key found in " << where;
  EXPECT_GE(r.value("dumped_files", 0), 3);  // small.txt, got.txt, .aws/config
}

// Transparent capture: clients that ignore the proxy variables reach the upstream by name (a
// synthetic address from sluice's DNS), the captured TLS is inspected, and every request is
// checked and signed again exactly as through the proxy port.
TEST_F(SigV4Run, ClientsThatIgnoreTheProxyAreSignedAgainUnderTransparentCapture) {
  REQUIRE_SANDBOX();
  std::string missing;
  if (!toolsPresent(&missing)) {
    if (isolationRequired()) FAIL() << "required tool missing: " << missing;
    GTEST_SKIP() << "tool missing: " << missing;
  }
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicyAndSecrets(kTransparentHost);
  Outcome o = runTransparent();
  ASSERT_EQ(o.status, 0) << o.err.substr(o.err.size() > 8000 ? o.err.size() - 8000 : 0) << "\n"
                         << o.out;
  // A synthetic address (getent may print the A or the AAAA answer).
  EXPECT_TRUE(o.out.find("resolved: 198.18.") != std::string::npos ||
              o.out.find("resolved: 64:ff9b:1::") != std::string::npos)
      << o.out;
  for (const char* step : {"put-ok", "ls-ok", "get-ok", "stream-ok", "wrong-refused"})
    EXPECT_NE(o.out.find(step), std::string::npos) << step << " missing in:\n" << o.out << o.err;

  // The upstream saw only the real key's signatures, the streaming upload whole.
  bool streamed = false;
  for (const json& e : upstreamLog()) {
    EXPECT_TRUE(e.value("ok", false)) << e.dump();
    EXPECT_EQ(e.value("path", "").find("wrongbucket"), std::string::npos) << e.dump();
    if (e.value("path", "") == "/bucket/tp-stream.bin")
      streamed = e.value("streaming", false) && e.value("size", 0) == (8 << 20);
  }
  EXPECT_TRUE(streamed);

  // Captured (not proxied) connections, inspected; requests re-signed or refused.
  const std::string db = (dir_ / "audit.db").string();
  EXPECT_GE(sluice::testing::auditCount(
                db, std::string("SELECT count(*) FROM connections WHERE kind='transparent' AND "
                                "tls='inspect' AND decision='allow' AND host='") +
                        kTransparentHost + "'"),
            4);
  EXPECT_EQ(sluice::testing::auditCount(db,
                                        "SELECT count(*) FROM connections WHERE kind<>"
                                        "'transparent' AND kind<>'token'"),
            0);
  EXPECT_GE(sluice::testing::auditCount(
                db,
                "SELECT count(*) FROM requests WHERE decision='allow' AND status=200 AND "
                "injected_secrets LIKE '%aws_key%'"),
            4);
  EXPECT_GE(sluice::testing::auditCount(db,
                                        "SELECT count(*) FROM requests WHERE "
                                        "reason='signature_mismatch' AND status=403"),
            1);
  for (const auto& where : leaks(o)) ADD_FAILURE() << "the real key found in " << where;
}

}  // namespace
