// HTTP/2 under transparent capture, end to end: `nghttp` (nghttp2-client, which has no proxy
// support at all) inside `sluice run` reaches an `nghttpd` upstream (which speaks only h2) on
// 127.0.0.1 by name. sluice's DNS answers a synthetic address, the connection to it is captured
// and inspected: h2 to the client (ALPN) and to the upstream, every stream decided as a request.
// Two streams multiplexed on one connection: one allowed and injected (the upstream logs the
// header it received), one refused on its own stream. The proxy's own resolver gets the name
// from an /etc/hosts in a mount namespace of the test's (nothing of the host changes).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "https_upstream.hpp"
#include "isolation.hpp"
#include "proc_scan.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;

namespace {

using sluice::testing::auditCount;
using sluice::testing::Outcome;
using sluice::testing::shellOutput;
using sluice::testing::slurp;

constexpr const char* kHost = "h2.sluice.test";

// What `nghttp -v` printed: each request's :path and the :status it got, by stream.
std::map<std::string, int> statusByPath(const std::string& verbose) {
  static const std::regex send(R"(send HEADERS frame <.*stream_id=(\d+)>)");
  static const std::regex path(R"(^\s+:path: (\S+))");
  static const std::regex recv(R"(recv \(stream_id=(\d+)\) :status: (\d+))");
  std::map<std::string, std::string> path_of;  // stream id -> path
  std::map<std::string, int> out;
  std::istringstream in(verbose);
  std::string stream;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, send)) {
      stream = m[1];
    } else if (!stream.empty() && std::regex_search(line, m, path)) {
      path_of[stream] = m[1];
      stream.clear();
    } else if (std::regex_search(line, m, recv)) {
      out[path_of[m[1]]] = std::stoi(m[2]);
    }
  }
  return out;
}

class H2TransparentRun : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    dir_ = fs::temp_directory_path() / ("sluice-h2tp-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "htdocs");
    std::ofstream(dir_ / "htdocs" / "index.html") << "hello over h2\n";
    std::ofstream(dir_ / "htdocs" / "denied.html") << "must not be served\n";
    secret_ = "sk-h2-transparent-" + sluice::testing::randomText(16);
  }
  void TearDown() override {
    if (nghttpd_ > 0) {
      ::kill(nghttpd_, SIGTERM);
      ::waitpid(nghttpd_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  // nghttpd on 127.0.0.1 (a port of its choosing, read back with ss), verbose: every header
  // it receives goes to dir_/nghttpd.log.
  void startNghttpd() {
    ASSERT_EQ(sluice::testing::makeUpstreamCertificates(dir_, kHost), "")
        << slurp(dir_ / "certs.log");
    nghttpd_ = ::fork();
    if (nghttpd_ == 0) {
      const std::string log = (dir_ / "nghttpd.log").string();
      std::freopen(log.c_str(), "w", stdout);
      std::freopen(log.c_str(), "a", stderr);
      ::execl("/usr/sbin/nghttpd", "nghttpd", "-v", "-a", "127.0.0.1", "-d",
              (dir_ / "htdocs").c_str(), "0", (dir_ / "server.key").c_str(),
              (dir_ / "server.pem").c_str(), nullptr);
      ::_exit(99);
    }
    ASSERT_GT(nghttpd_, 0);
    for (int i = 0; i < 100 && port_.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto [rc, out] = shellOutput("ss -Hltnp | grep 'pid=" + std::to_string(nghttpd_) +
                                   ",' | awk '{print $4}' | sed 's/.*://'");
      if (rc == 0 && !out.empty()) port_ = out.substr(0, out.find('\n'));
    }
    ASSERT_FALSE(port_.empty()) << slurp(dir_ / "nghttpd.log");
  }

  void writePolicyAndSecrets() {
    std::ofstream(dir_ / "h2.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: h2-transparent\n"
           "sandbox:\n  timeout: 60s\n  network: proxy\negress:\n  rules:\n"
           "    - id: h2-api\n      action: allow\n      hosts: ["
        << kHost << "]\n      ports: [" << port_
        << "]\n      allow_private: true\n      cidrs: [\"127.0.0.0/8\"]\n      tls: inspect\n"
           "      methods: [GET]\n      paths: [\"/index.html\"]\n"
           "      inject:\n        headers:\n          X-Api-Key: \"${secret:h2_key}\"\n";
    const fs::path p = dir_ / "secrets.yaml";
    std::ofstream(p) << "h2_key: {value: \"" << secret_ << "\"}\n";
    ::chmod(p.c_str(), 0600);
  }

  // nghttp in the sandbox, both URLs on one connection (it has no proxy option: only transparent
  // capture can take it through the proxy).
  Outcome runNghttp() {
    sluice::testing::withHosts(dir_, std::string("127.0.0.1 ") + kHost);
    const std::string base = std::string("https://") + kHost + ":" + port_;
    return sluice::testing::runBinary("/usr/bin/unshare", dir_,
                                      {"-m",
                                       "--propagation",
                                       "private",
                                       (dir_ / "with-hosts.sh").string(),
                                       SLUICE_BINARY,
                                       "run",
                                       "--policy",
                                       (dir_ / "h2.yaml").string(),
                                       "--audit",
                                       db(),
                                       "--secrets",
                                       (dir_ / "secrets.yaml").string(),
                                       "--upstream-ca",
                                       (dir_ / "ca.pem").string(),
                                       "--",
                                       "nghttp",
                                       "-v",
                                       "-n",
                                       base + "/index.html",
                                       base + "/denied.html"});
  }

  std::string db() const { return (dir_ / "audit.db").string(); }

  fs::path dir_;
  std::string secret_, port_;
  pid_t nghttpd_ = -1;
};

TEST_F(H2TransparentRun, NghttpIsInspectedStreamByStreamAgainstAnH2OnlyUpstream) {
  REQUIRE_SANDBOX();
  for (const char* t : {"/usr/bin/nghttp", "/usr/sbin/nghttpd", "/usr/bin/openssl"}) {
    if (::access(t, X_OK) == 0) continue;
    if (isolationRequired()) FAIL() << "required tool missing: " << t;
    GTEST_SKIP() << "tool missing: " << t;
  }
  startNghttpd();
  if (HasFatalFailure()) return;
  writePolicyAndSecrets();
  const Outcome o = runNghttp();
  const std::string log = slurp(dir_ / "nghttpd.log");

  // h2 to the proxy, one 200 and one 403 on their own streams of one connection.
  EXPECT_NE(o.out.find("The negotiated protocol: h2"), std::string::npos) << o.out << o.err;
  const auto status = statusByPath(o.out);
  EXPECT_EQ(status.count("/index.html") ? status.at("/index.html") : 0, 200) << o.out;
  EXPECT_EQ(status.count("/denied.html") ? status.at("/denied.html") : 0, 403) << o.out;
  EXPECT_EQ(o.out.find(secret_), std::string::npos);

  // The upstream (h2 only) got the allowed stream with the injected header, never the other.
  EXPECT_NE(log.find(":path: /index.html"), std::string::npos) << log;
  EXPECT_NE(log.find("x-api-key: " + secret_), std::string::npos) << log;
  EXPECT_EQ(log.find(":path: /denied.html"), std::string::npos) << log;

  // One captured, inspected connection; a row per stream.
  EXPECT_EQ(auditCount(db(), std::string("SELECT count(*) FROM connections WHERE kind="
                                         "'transparent' AND tls='inspect' AND host='") +
                                 kHost + "' AND decision='allow'"),
            1);
  EXPECT_EQ(auditCount(db(),
                       "SELECT count(*) FROM requests WHERE path='/index.html' AND "
                       "decision='allow' AND status=200 AND injected_secrets LIKE "
                       "'%h2_key%'"),
            1);
  EXPECT_EQ(auditCount(db(),
                       "SELECT count(*) FROM requests WHERE path='/denied.html' AND "
                       "decision='deny' AND status=403 AND reason='path_not_allowed'"),
            1);
  // The real value reached the upstream only: not sluice's output, logs or audit store.
  for (const auto& where : sluice::testing::whereFound({secret_}, o, dir_))
    ADD_FAILURE() << "the injected secret found in " << where;
}

}  // namespace
