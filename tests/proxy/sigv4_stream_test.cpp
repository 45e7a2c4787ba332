// A streaming SigV4 upload (aws-chunked, STREAMING-AWS4-HMAC-SHA256-PAYLOAD) of 256 MiB through
// the proxy, re-signed chunk by chunk in constant memory. The proxy runs in this process; the
// client (tests/proxy/sigv4_stream_client.py, signed by botocore with the sandbox's placeholder
// key) and the HTTPS upstream (tests/proxy/sigv4_stream_upstream.py, which checks the seed
// signature with botocore's signer and every chunk signature with the REAL key) are Python
// processes on 127.0.0.1. The upstream resets this process's peak RSS when the upload's header
// arrives and reads it when the last chunk has: the growth must stay under a fixed bound, far
// below the upload's size (memory, not time).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../integration/https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kRealId = "AKIAREALSTREAMING002";
constexpr const char* kRealSecret = "real/streaming+secret000000000000000000";
constexpr long long kUploadBytes = 256LL << 20;
constexpr long long kMaxGrowthKb = 64 << 10;  // 64 MiB, a quarter of the upload

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool toolsPresent() {
  return ::access("/usr/bin/python3", X_OK) == 0 && ::access("/usr/bin/openssl", X_OK) == 0 &&
         std::system("python3 -c 'import botocore' 2>/dev/null") == 0;
}

std::string policyYaml(const std::string& port) {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: s3-stream\negress:\n  rules:\n"
         "    - id: s3\n      action: allow\n      hosts: [localhost]\n      ports: [" +
         port +
         "]\n      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n      tls: inspect\n"
         "      methods: [PUT]\n"
         "      inject:\n        aws_sigv4:\n          access_key_id: ${secret:aws_id}\n"
         "          secret_access_key: ${secret:aws_key}\n"
         "  limits:\n    max_bytes_out: 1GiB\n";
}

class SigV4StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!toolsPresent()) GTEST_SKIP() << "python3 with botocore and openssl are needed";
    char tmpl[] = "/tmp/sluice-sigv4-stream-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(sluice::testing::makeUpstreamCertificates(dir_), "") << slurp(dir_ / "certs.log");
    startUpstream();
    if (HasFatalFailure()) return;
    startProxy();
  }

  void TearDown() override {
    if (proxy_) proxy_->stop();
    if (upstream_ > 0) {
      ::kill(upstream_, SIGTERM);
      int st = 0;
      ::waitpid(upstream_, &st, 0);
    }
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // The upstream measures this process (the proxy's) through --pidfile.
  void startUpstream() {
    std::ofstream(dir_ / "proxy.pid") << ::getpid();
    const std::string src = SLUICE_SOURCE_DIR;
    upstream_ = sluice::testing::startPythonUpstream(
        dir_,
        {src + "/tests/proxy/sigv4_stream_upstream.py", "--cert", (dir_ / "server.pem").string(),
         "--key", (dir_ / "server.key").string(), "--portfile", (dir_ / "port").string(), "--log",
         (dir_ / "upstream.log").string(), "--id", kRealId, "--secret", kRealSecret, "--pidfile",
         (dir_ / "proxy.pid").string()},
        dir_ / "port", upstream_port_);
    ASSERT_GT(upstream_, 0);
    ASSERT_FALSE(upstream_port_.empty()) << slurp(dir_ / "upstream.stderr");
  }

  void startProxy() {
    auto w = policy::parseWorkflow(policyYaml(upstream_port_), "s3-stream.yaml");
    ASSERT_TRUE(w) << w.error().str();
    auto workflow = std::make_shared<const policy::Workflow>(std::move(*w));
    placeholders_ = makePlaceholders(*workflow);
    auto ca = CertificateAuthority::createEphemeral("sluice streaming SigV4 test CA");
    ASSERT_TRUE(ca) << ca.error();
    std::ofstream(dir_ / "proxy-ca.pem") << (*ca)->certificatePem();
    auto resolver = std::make_shared<StaticResolver>();
    resolver->add("localhost", {*policy::parseIpLiteral("127.0.0.1")});
    ProxyOptions o;
    o.threads = 2;
    o.ca = *ca;
    o.upstream_ca_files = {(dir_ / "ca.pem").string()};
    sink_ = std::make_shared<testing::FakeSink>();
    auto p = Proxy::create(std::move(o), sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    ListenerIdentity id("exec-stream", policy::Matcher::compile(workflow),
                        policy::makeSecretStore({{"aws_id", kRealId}, {"aws_key", kRealSecret}}),
                        placeholders_);
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    proxy_port_ = *port;
    proxy_->start();
  }

  std::string placeholder(const std::string& env) const {
    for (const auto& p : placeholders_)
      if (p.env == env) return p.token;
    return "";
  }

  // Runs the client (a 1 MiB upload, then `bytes`) with the placeholder key; its JSON lines.
  std::vector<json> upload(long long bytes) {
    const std::string cmd = "python3 " SLUICE_SOURCE_DIR "/tests/proxy/sigv4_stream_client.py" +
                            std::string(" --proxy 127.0.0.1:") + std::to_string(proxy_port_) +
                            " --port " + upstream_port_ + " --cafile " +
                            (dir_ / "proxy-ca.pem").string() + " --id " +
                            placeholder("AWS_ACCESS_KEY_ID") + " --secret '" +
                            placeholder("AWS_SECRET_ACCESS_KEY") + "' --warmup 1048576 --size " +
                            std::to_string(bytes) + " 2>" + (dir_ / "client.stderr").string();
    std::vector<json> out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char line[4096];
      while (std::fgets(line, sizeof line, p)) out.push_back(json::parse(line, nullptr, false));
      ::pclose(p);
    }
    return out;
  }

  // The upstream's record of the upload to `path` (null when it has none).
  json upstreamRecord(const std::string& path) {
    std::ifstream in(dir_ / "upstream.log");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("path", "") == path) return j;
    }
    return nullptr;
  }

  fs::path dir_;
  pid_t upstream_ = -1;
  std::string upstream_port_;
  std::uint16_t proxy_port_ = 0;
  std::vector<Placeholder> placeholders_;
  std::shared_ptr<testing::FakeSink> sink_;
  std::unique_ptr<Proxy> proxy_;
};

TEST_F(SigV4StreamTest, A256MiBUploadIsSignedAgainChunkByChunkInBoundedMemory) {
  const std::vector<json> results = upload(kUploadBytes);
  ASSERT_EQ(results.size(), 2u) << slurp(dir_ / "client.stderr") << slurp(dir_ / "upstream.stderr");
  for (const json& r : results) EXPECT_EQ(r.value("status", 0), 200) << r.dump();

  // Every chunk arrived signed with the real key's chain, the whole upload's bytes.
  const json big = upstreamRecord("/bucket/upload.bin");
  ASSERT_TRUE(big.is_object()) << slurp(dir_ / "upstream.log");
  EXPECT_TRUE(big.value("ok", false)) << big.dump();
  EXPECT_EQ(big.value("bytes", 0LL), kUploadBytes);
  EXPECT_EQ(big.value("chunks", 0LL), kUploadBytes / (64 << 10) + 1);

  // The proxy's peak RSS while the upload streamed, over its RSS when the header arrived.
  const long long before = big.value("rss_before_kb", 0LL);
  const long long peak = big.value("rss_peak_kb", 0LL);
  ASSERT_GT(before, 0) << big.dump();
  EXPECT_LT(peak - before, kMaxGrowthKb) << "RSS " << before << " kB -> peak " << peak << " kB";

  // Audited as an allowed, re-signed request.
  auto row = sink_->waitRequest([](const audit::RequestEvent& e) {
    return e.method == "PUT" && e.path == "/bucket/upload.bin";
  });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kAllow);
  EXPECT_EQ(row->status, 200);
  EXPECT_NE(std::find(row->injected_secrets.begin(), row->injected_secrets.end(), "aws_key"),
            row->injected_secrets.end());
}

}  // namespace
}  // namespace sluice::proxy
