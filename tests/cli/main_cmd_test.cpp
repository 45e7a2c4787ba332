// The command line as a whole: unknown commands, and durations written the same way on the
// command line and in a policy file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "sluice_cli.hpp"

namespace {

namespace fs = std::filesystem;

using Result = sluice::testing::CliRun;
using sluice::testing::sluice;

TEST(CommandLine, AnUnknownCommandNamesTheNearestOnes) {
  auto r = sluice("polcy check x.yaml");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(r.out, "sluice: unknown command 'polcy' (did you mean 'policy'?); see sluice --help\n");
  r = sluice("bogus");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(
      r.out.rfind("sluice: unknown command 'bogus' (commands: policy, audit, proxy, run, gc, ", 0),
      0u)
      << r.out;
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos) << r.out;
}

TEST(CommandLine, ACommandAndOptionsStillParse) {
  EXPECT_EQ(sluice("--version").status, 0);
  EXPECT_EQ(sluice("--help").status, 0);
  auto r = sluice("policy chek");
  EXPECT_EQ(r.status, 2) << r.out;
}

class Durations : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sluice-durations-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string policy(const std::string& timeout) {
    const fs::path p = dir_ / "w.yaml";
    std::ofstream(p) << "apiVersion: sluice/v1\nkind: Workflow\nname: w\nsandbox:\n  network: "
                        "none\n  timeout: "
                     << timeout << "\n";
    return p.string();
  }
  // The effective wall-clock limit of `sluice run` under `policy` with `flags`, from its receipt.
  long timeoutMs(const std::string& policy, const std::string& flags) {
    auto r = sluice("run --json --policy " + policy + " " + flags + " -- true", "2>/dev/null");
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.contains("limits")) {
      ADD_FAILURE() << "no receipt: " << r.out;
      return -1;
    }
    return j["limits"]["timeout_ms"].get<long>();
  }
  fs::path dir_;
};

// A bare number is seconds in both places, and a unit means the same in both.
TEST_F(Durations, BareSecondsAndUnitsAgreeOnTheCommandLineAndInYaml) {
  EXPECT_EQ(timeoutMs(policy("5"), ""), 5000);
  EXPECT_EQ(timeoutMs(policy("5s"), ""), 5000);
  EXPECT_EQ(timeoutMs(policy("1m"), "--timeout 5"), 5000);
  EXPECT_EQ(timeoutMs(policy("1m"), "--timeout 5s"), 5000);
  auto check = sluice("policy check " + policy("5"));
  EXPECT_NE(check.out.find("timeout 5s"), std::string::npos) << check.out;
}

TEST_F(Durations, EveryDurationFlagTakesBareSeconds) {
  const fs::path ca = dir_ / "ca";
  auto r = sluice("ca init --dir " + ca.string() + " --validity 86400");
  EXPECT_EQ(r.status, 0) << r.out;
  r = sluice("ca init --dir " + (dir_ / "ca2").string() + " --validity '1 day'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--validity"), std::string::npos) << r.out;
}

}  // namespace
