// `sluice policy check | explain | test` as a user runs them: exit statuses, output and JSON,
// decisions allow, deny and ask.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sluice_cli.hpp"

namespace {

namespace fs = std::filesystem;

using Result = sluice::testing::CliRun;
using sluice::testing::sluice;

class PolicyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    write("stats.yaml",
          "apiVersion: sluice/v1\nkind: Workflow\nname: stats\negress:\n  rules:\n"
          "    - id: stats-api\n      action: allow\n      hosts: [stats.internal.example]\n"
          "      ports: [443]\n      allow_private: true\n      cidrs: [\"10.20.0.0/16\"]\n"
          "      tls: inspect\n      methods: [GET, POST]\n      paths: [\"/v1/*\"]\n"
          "      inject:\n        headers:\n"
          "          Authorization: \"Bearer ${secret:stats_token}\"\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::string path(const std::string& name) { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(PolicyCli, CheckOkPrintsASummaryPerWorkflow) {
  auto r = sluice("policy check " + path("stats.yaml"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("ok stats"), std::string::npos) << r.out;
}

TEST_F(PolicyCli, CheckReportsEveryProblemWithPosition) {
  auto bad = write("bad.yaml",
                   "apiVersion: sluice/v1\nkind: Workflow\nname: bad\negress:\n  rules:\n"
                   "    - id: a\n      action: allow\n      hots: [x.example]\n");
  auto r = sluice("policy check " + bad);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(bad + ":8:7: unknown key 'hots' in rule (did you mean 'hosts'?)"),
            std::string::npos)
      << r.out;
}

TEST_F(PolicyCli, CheckExamplesDirectory) {
  auto r = sluice(std::string("policy check ") + SLUICE_SOURCE_DIR + "/examples/workflows");
  EXPECT_EQ(r.status, 0) << r.out;
  // The shipped examples are what users copy: each checks clean, without a single warning.
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
  std::size_t oks = 0;
  for (std::size_t at = 0; (at = r.out.find("ok ", at)) != std::string::npos; ++at) ++oks;
  EXPECT_EQ(oks, 4u) << r.out;
}

TEST_F(PolicyCli, ExplainAllowJson) {
  auto r = sluice("policy explain --policy " + path("stats.yaml") +
                  " --url https://stats.internal.example/v1/q --method POST --ip 10.20.0.5 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["decision"], "allow");
  EXPECT_EQ(j["rule"], "stats-api");
  EXPECT_EQ(j["reason"], "allowed");
  EXPECT_EQ(j["inject"], nlohmann::json::array({"Authorization"}));
  EXPECT_TRUE(j["nearest_miss"].is_null());
  EXPECT_TRUE(j.contains("detail"));
}

TEST_F(PolicyCli, ExplainDenyWithNearestMiss) {
  auto r = sluice("policy explain --policy " + path("stats.yaml") +
                  " --connect stats.internal.example:8443 --json");
  ASSERT_EQ(r.status, 1) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["decision"], "deny");
  EXPECT_EQ(j["reason"], "port_not_allowed");
  EXPECT_EQ(j["nearest_miss"],
            "rule stats-api matched host stats.internal.example but port 8443 is not in [443]");
}

// A connection the sandbox made without the proxy (transparent capture) is decided as CONNECT
// to its host and original port; an IP literal only by cidrs rules.
TEST_F(PolicyCli, ExplainTransparent) {
  auto by_name = sluice("policy explain --policy " + path("stats.yaml") +
                        " --transparent stats.internal.example:443 --json");
  auto as_connect = sluice("policy explain --policy " + path("stats.yaml") +
                           " --connect stats.internal.example:443 --json");
  ASSERT_EQ(by_name.status, as_connect.status) << by_name.out;
  auto j = nlohmann::json::parse(by_name.out);
  auto c = nlohmann::json::parse(as_connect.out);
  EXPECT_EQ(j["path"], "transparent");
  EXPECT_EQ(j["decision"], c["decision"]);
  EXPECT_EQ(j["reason"], c["reason"]);
  auto literal = sluice("policy explain --policy " + path("stats.yaml") +
                        " --transparent 203.0.113.9:443 --json");
  EXPECT_EQ(literal.status, 1);
  EXPECT_EQ(nlohmann::json::parse(literal.out)["reason"], "ip_literal_needs_cidrs");
  auto both =
      sluice("policy explain --policy " + path("stats.yaml") + " --transparent a:1 --connect a:1");
  EXPECT_EQ(both.status, 2);
}

// What sluice's DNS answers: a synthetic address for a name an allow rule could match, else
// NXDOMAIN (exit 0 / 1 like the other queries).
TEST_F(PolicyCli, ExplainDns) {
  auto allowed = sluice("policy explain --policy " + path("stats.yaml") +
                        " --dns stats.internal.example --json");
  ASSERT_EQ(allowed.status, 0) << allowed.out;
  auto j = nlohmann::json::parse(allowed.out);
  EXPECT_EQ(j["answer"], "synthetic");
  EXPECT_EQ(j["path"], "dns");
  auto denied = sluice("policy explain --policy " + path("stats.yaml") +
                       " --dns exfil-0001.attacker.example");
  EXPECT_EQ(denied.status, 1) << denied.out;
  EXPECT_NE(denied.out.find("NXDOMAIN"), std::string::npos) << denied.out;
}

TEST_F(PolicyCli, ExplainIpAppliesTheSsrfGuard) {
  auto r = sluice("policy explain --policy " + path("stats.yaml") +
                  " --url https://stats.internal.example/v1/q --ip 169.254.169.254 --json");
  ASSERT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["reason"], "address_not_in_cidrs");
}

TEST_F(PolicyCli, ExplainNeverPrintsSecretValues) {
  auto r = sluice("policy explain --policy " + path("stats.yaml") +
                  " --url https://stats.internal.example/v1/q --ip 10.20.0.5");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Authorization"), std::string::npos);
  EXPECT_NE(r.out.find("stats_token"), std::string::npos);  // the name, never a value
}

TEST_F(PolicyCli, ExplainErrorsExitTwo) {
  EXPECT_EQ(sluice("policy explain --policy " + path("stats.yaml") + " --url ftp://x/").status, 2);
  EXPECT_EQ(sluice("policy explain --policy " + path("missing.yaml") + " --connect a:1").status, 2);
  EXPECT_EQ(sluice("policy explain --policy " + path("stats.yaml")).status, 2);
  EXPECT_EQ(sluice("policy explain --policy " + path("stats.yaml") +
                   " --connect a.example:1 --ip not-an-ip")
                .status,
            2);
}

TEST_F(PolicyCli, PolicyTestPassesAndFails) {
  auto ok = write("ok-cases.yaml",
                  "policy: stats.yaml\ncases:\n"
                  "  - name: get allowed\n    url: https://stats.internal.example/v1/a\n"
                  "    ip: 10.20.1.1\n    expect: allow\n    rule: stats-api\n"
                  "  - name: wrong port\n    connect: stats.internal.example:8443\n"
                  "    expect: deny\n    reason: port_not_allowed\n");
  auto r = sluice("policy test " + ok);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 passed, 0 failed"), std::string::npos) << r.out;

  auto bad = write("bad-cases.yaml",
                   "policy: stats.yaml\ncases:\n"
                   "  - name: delete expected allowed\n"
                   "    url: https://stats.internal.example/v1/a\n    method: DELETE\n"
                   "    expect: allow\n");
  r = sluice("policy test " + bad);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL delete expected allowed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("method_not_allowed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 passed, 1 failed"), std::string::npos) << r.out;
}

TEST_F(PolicyCli, ExamplePolicyTestsPass) {
  fs::path dir = fs::path(SLUICE_SOURCE_DIR) / "examples" / "policy-tests";
  if (!fs::exists(dir)) GTEST_SKIP() << "no example policy tests";
  for (const auto& e : fs::directory_iterator(dir)) {
    auto r = sluice("policy test " + e.path().string());
    EXPECT_EQ(r.status, 0) << e.path() << "\n" << r.out;
  }
}

// `action: ask` rules: explain exits 3, and `policy test` cases expect ask.
class AskCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-ask-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    write("gate.yaml",
          "apiVersion: sluice/v1\nkind: Workflow\nname: gate\negress:\n  rules:\n"
          "    - id: gate\n      action: ask\n      hosts: [api.example.com]\n"
          "      ask: {timeout: 2s}\n"
          "    - id: insp\n      action: ask\n      hosts: [i.example.com]\n      tls: inspect\n"
          "    - id: ok\n      action: allow\n      hosts: [\"*.example.com\"]\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::string path(const std::string& name) { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(AskCli, ExplainAskExitsThree) {
  auto r =
      sluice("policy explain --policy " + path("gate.yaml") + " --connect api.example.com:443");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("decision:     ask"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("approval_required"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ask.timeout 2s"), std::string::npos) << r.out;

  r = sluice("policy explain --policy " + path("gate.yaml") +
             " --url https://i.example.com/x --method POST --json");
  ASSERT_EQ(r.status, 3) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["decision"], "ask");
  EXPECT_EQ(j["rule"], "insp");
  EXPECT_EQ(j["phase"], "request");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/x");

  // The CONNECT of the inspected tunnel is allowed; the ask is per request.
  r = sluice("policy explain --policy " + path("gate.yaml") +
             " --connect i.example.com:443 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["decision"], "allow");
  // Not named by the ask rules: allowed.
  r = sluice("policy explain --policy " + path("gate.yaml") + " --connect x.example.com:443");
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST_F(AskCli, PolicyTestExpectAsk) {
  auto ok = write("ok.yaml",
                  "policy: gate.yaml\ncases:\n"
                  "  - name: gate asks\n    connect: api.example.com:443\n"
                  "    expect: ask\n    rule: gate\n    reason: approval_required\n"
                  "  - name: inspected request asks\n    url: https://i.example.com/v\n"
                  "    expect: ask\n    rule: insp\n"
                  "  - name: others allowed\n    connect: x.example.com:443\n    expect: allow\n");
  auto r = sluice("policy test " + ok);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("3 passed, 0 failed"), std::string::npos) << r.out;

  auto bad = write("bad.yaml",
                   "policy: gate.yaml\ncases:\n"
                   "  - name: allow is not ask\n    connect: x.example.com:443\n"
                   "    expect: ask\n"
                   "  - name: ask is not allow\n    connect: api.example.com:443\n"
                   "    expect: allow\n");
  r = sluice("policy test " + bad);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL allow is not ask"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL ask is not allow"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 passed, 2 failed"), std::string::npos) << r.out;

  auto typo = write("typo.yaml",
                    "policy: gate.yaml\ncases:\n"
                    "  - name: t\n    connect: x.example.com:443\n    expect: maybe\n");
  r = sluice("policy test " + typo);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("'expect' must be allow, deny or ask"), std::string::npos) << r.out;
}

}  // namespace
