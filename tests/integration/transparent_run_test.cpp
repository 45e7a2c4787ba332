// Transparent capture and sluice's DNS end to end (issue 13): `sluice run` programs that ignore
// the proxy variables — Node's fetch, curl --noproxy '*', Python sockets, getent — against an
// upstream in a network namespace this test makes (reached from the host over a veth pair, the
// way a private service would be), and DNS exfiltration attempts. Nothing may reach what no rule
// allows, and every attempt is in the audit store.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "isolation.hpp"
#include "proc_scan.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sluice::testing::shellOutput;
auto sh(const std::string& cmd) { return shellOutput(cmd); }

// An upstream at 10.231.0.2:8080 in namespace "sluice-tp-<pid>", veth to the host (10.231.0.1).
class TransparentRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    ns_ = "sluice-tp-" + std::to_string(::getpid());
    dir_ = fs::temp_directory_path() / ns_;
    fs::create_directories(dir_);
    std::ofstream(dir_ / "index.html") << "hello from upstream\n";
    const std::string host_if = "tph" + std::to_string(::getpid() % 100000);
    const std::string ns_if = "tpn" + std::to_string(::getpid() % 100000);
    auto [rc, out] =
        sh("set -e; ip netns add " + ns_ + "; ip link add " + host_if + " type veth peer name " +
           ns_if + "; ip link set " + ns_if + " netns " + ns_ + "; ip addr add 10.231.0.1/24 dev " +
           host_if + "; ip link set " + host_if + " up; ip netns exec " + ns_ +
           " ip addr add 10.231.0.2/24 dev " + ns_if + "; ip netns exec " + ns_ + " ip link set " +
           ns_if + " up; ip netns exec " + ns_ + " ip link set lo up");
    ASSERT_EQ(rc, 0) << out;
    host_if_ = host_if;
    server_ = ::fork();
    if (server_ == 0) {
      ::chdir(dir_.c_str());
      ::execlp("ip", "ip", "netns", "exec", ns_.c_str(), "/usr/bin/python3", "-m", "http.server",
               "8080", "--bind", "10.231.0.2", static_cast<char*>(nullptr));
      ::_exit(99);
    }
    for (int i = 0; i < 100; ++i) {
      if (sh("curl -s --max-time 1 http://10.231.0.2:8080/index.html").second.find("hello") !=
          std::string::npos)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::ofstream(dir_ / "policy.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: transparent\nsandbox:\n  timeout: 30s\n"
           "  network: proxy\negress:\n  rules:\n"
           "    - {id: private-api, action: allow, cidrs: [\"10.231.0.2/32\"], allow_private: true,"
           " ports: [8080]}\n"
           "    - {id: named, action: allow, hosts: [\"api.allowed.test\"], ports: [443]}\n";
  }
  void TearDown() override {
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
    }
    if (!ns_.empty()) sh("ip link del " + host_if_ + "; ip netns del " + ns_);
    fs::remove_all(dir_);
  }
  // `sluice run --json` of `sh -c SCRIPT`: the receipt.
  json run(const std::string& script) {
    auto [rc, out] =
        sh(std::string(SLUICE_BINARY) + " run --policy " + (dir_ / "policy.yaml").string() +
           " --audit " + db() + " --json -- /bin/sh -c '" + script + "'");
    json j = json::parse(out.substr(out.find('{')), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }
  std::string db() const { return (dir_ / "audit.db").string(); }
  std::string sql(const std::string& q) {
    return sh(std::string(SLUICE_BINARY) + " audit sql --db " + db() + " --format csv \"" + q +
              "\"")
        .second;
  }

  std::string ns_, host_if_;
  fs::path dir_;
  pid_t server_ = -1;
};

TEST_F(TransparentRun, ClientsThatIgnoreProxyVariablesStillGoThroughThePolicy) {
  REQUIRE_SANDBOX();
  // Node's fetch, curl with the proxy disabled, and a raw Python socket: to an allowed private
  // address (cidrs rule) they get the page; to anything else the connection is reset.
  auto r = run(
      "node -e \"fetch(\\\"http://10.231.0.2:8080/index.html\\\").then(r=>r.text())"
      ".then(t=>console.log(\\\"node:\\\"+t.trim())).catch(e=>console.log(\\\"node-error\\\"))\"; "
      "curl -s --noproxy \"*\" --max-time 5 http://10.231.0.2:8080/index.html | sed s/^/curl:/; "
      "python3 -c \"import socket; s=socket.create_connection((\\\"10.231.0.2\\\",8081),5); "
      "s.sendall(b\\\"x\\\"); print(\\\"py-open\\\", s.recv(10))\" 2>/dev/null || echo py-refused");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("node:hello from upstream"), std::string::npos) << out << r.dump();
  EXPECT_NE(out.find("curl:hello from upstream"), std::string::npos) << out;
  EXPECT_NE(out.find("py-refused"), std::string::npos) << out;
  EXPECT_NE(sql("SELECT count(*) AS n FROM connections WHERE kind = 'transparent' AND decision "
                "= 'allow' AND host = '10.231.0.2'")
                .find("\n2"),
            std::string::npos);
  EXPECT_NE(sql("SELECT count(*) AS n FROM connections WHERE kind = 'transparent' AND decision "
                "= 'deny' AND port = 8081")
                .find("\n1"),
            std::string::npos);
}

TEST_F(TransparentRun, DnsAnswersOnlyWhatARuleCouldAllowAndNothingLeaves) {
  REQUIRE_SANDBOX();
  auto r =
      run("getent hosts api.allowed.test | cut -d\" \" -f1 | sed s/^/allowed:/; "
          "getent hosts exfil-1234abcd.denied.test || echo denied-nxdomain; "
          "for i in $(seq 1 200); do getent hosts \"$i-data.leak.test\" >/dev/null && echo LEAKED; "
          "done; "
          "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
          "s.connect((\\\"192.0.2.53\\\",53)); s.send(b\\\"q\\\"); s.settimeout(2); "
          "print(\\\"udp-answer\\\", s.recv(10))\" 2>&1 | tail -1 | sed s/^/udp:/");
  const std::string out = r["stdout"]["text"];
  // getent may print the AAAA (64:ff9b:1::/48) or the A (198.18.0.0/15) answer.
  EXPECT_TRUE(out.find("allowed:198.18.") != std::string::npos ||
              out.find("allowed:64:ff9b:1::") != std::string::npos)
      << out;
  EXPECT_NE(out.find("denied-nxdomain"), std::string::npos) << out;
  EXPECT_EQ(out.find("LEAKED"), std::string::npos) << out;
  EXPECT_EQ(out.find("udp-answer"), std::string::npos) << out;
  // Every query is a row (getent asks A and AAAA: at least one row per name).
  auto rows = sql("SELECT count(DISTINCT name) AS n FROM dns_queries WHERE decision = 'deny'");
  auto n = std::atoi(rows.substr(rows.find('\n') + 1).c_str());
  EXPECT_GE(n, 201) << rows;
  auto [rc, v] = sh(std::string(SLUICE_BINARY) + " audit verify --db " + db());
  EXPECT_EQ(rc, 0) << v;
}

}  // namespace
