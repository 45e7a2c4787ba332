// The receipt JSON: every field of DESIGN.md, validated against schemas/receipt.v1.schema.json
// with python3-jsonschema.
#include "sluice/runner/receipt.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "isolation_required.hpp"

using namespace sluice::runner;

namespace {

RunResult sampleResult() {
  RunResult r;
  r.exit_code = 0;
  r.signal = 9;
  r.limit_hit = LimitHit::kTimeout;
  r.out = {12, false, "hello world\n"};
  r.err = {5000, true, std::string(100, 'x')};
  r.artifacts = {{"report.csv", 42, std::string(64, 'a')}};
  r.isolation = {
      {"mount", "pid", "net", "ipc", "uts", "cgroup"}, true, true, true, 65534, 65534, "v1"};
  r.started_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123));
  r.ended_at = r.started_at + std::chrono::milliseconds(1500);
  return r;
}

RunSpec sampleSpec() {
  RunSpec s;
  s.argv = {"python3", "-c", "print(1)"};
  s.execution_id = "ex-0123456789abcdef";
  return s;
}

TEST(Receipt, CarriesTheDesignFields) {
  ReceiptContext ctx;
  ctx.workflow = "data-analysis";
  ctx.policy_sha256 = std::string(64, 'f');
  ctx.network_mode = "proxy";
  ctx.network.denied = 1;
  ctx.network.denials.push_back({"evil.example", 443, "", "default_deny", {}, {}});
  auto j = buildReceipt(sampleSpec(), sampleResult(), ctx, std::string(64, '0'));
  EXPECT_EQ(j["execution_id"], "ex-0123456789abcdef");
  EXPECT_EQ(j["workflow"], "data-analysis");
  EXPECT_EQ(j["started_at"], "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(j["duration_ms"], 1500);
  EXPECT_EQ(j["exit"]["signal"], 9);
  EXPECT_EQ(j["exit"]["status"], 124);
  EXPECT_EQ(j["limit_hit"], "timeout");
  EXPECT_EQ(j["stderr"]["truncated"], true);
  EXPECT_EQ(j["network"]["denials"][0]["rule"], nullptr);
  EXPECT_EQ(j["hash"], std::string(64, '0'));
}

// A policy's read-only host paths are listed; a run without them has no `mounts` key.
TEST(Receipt, ListsThePolicysHostMounts) {
  RunSpec spec = sampleSpec();
  EXPECT_FALSE(buildReceipt(spec, sampleResult(), {}, std::nullopt).contains("mounts"));
  spec.mounts = {{"/etc/apt", "/etc/apt"}, {"/var/lib/apt/lists", "/var/lib/apt/lists"}};
  auto j = buildReceipt(spec, sampleResult(), {}, std::nullopt);
  EXPECT_EQ(j["mounts"].dump(),
            R"([{"read_only":true,"source":"/etc/apt","target":"/etc/apt"},)"
            R"({"read_only":true,"source":"/var/lib/apt/lists","target":"/var/lib/apt/lists"}])");
}

TEST(Receipt, ExitStatusMapping) {
  RunResult r;
  EXPECT_EQ(r.sluiceExitStatus(), 0);
  r.exit_code = 3;
  EXPECT_EQ(r.sluiceExitStatus(), 3);
  r.exit_code = 0;
  r.signal = 15;
  EXPECT_EQ(r.sluiceExitStatus(), 143);
  r.limit_hit = LimitHit::kMemory;
  EXPECT_EQ(r.sluiceExitStatus(), 124);
  r.signal = 0;  // memory limit hit but the program coped and exited 0
  EXPECT_EQ(r.sluiceExitStatus(), 0);
  r.limit_hit = LimitHit::kOutput;  // output truncation never changes the status
  r.exit_code = 2;
  EXPECT_EQ(r.sluiceExitStatus(), 2);
  r.stopped_by_request = true;
  r.stop_signal = 2;
  EXPECT_EQ(r.sluiceExitStatus(), 130);
}

TEST(Receipt, ValidatesAgainstSchema) {
  if (std::system("python3 -c 'import jsonschema' 2>/dev/null") != 0) {
    if (isolationRequired()) FAIL() << "python3-jsonschema is missing";
    GTEST_SKIP() << "python3-jsonschema not installed";
  }
  const std::string file = "/tmp/sluice-receipt-" + std::to_string(::getpid()) + ".json";
  RunSpec with_mounts = sampleSpec();
  with_mounts.mounts = {{"/etc/apt", "/etc/apt"}};
  for (bool with_hash : {false, true}) {
    ReceiptContext ctx;
    ctx.workflow = "w";
    ctx.policy_sha256 = std::string(64, 'a');
    auto j =
        buildReceipt(with_hash ? with_mounts : sampleSpec(), sampleResult(), ctx,
                     with_hash ? std::optional<std::string>(std::string(64, 'b')) : std::nullopt);
    std::ofstream(file) << j.dump();
    const std::string cmd =
        "python3 -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
        "json.load(open(sys.argv[2])))' " +
        file + " " SLUICE_SOURCE_DIR "/schemas/receipt.v1.schema.json";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << j.dump(2);
  }
  std::remove(file.c_str());
}

}  // namespace
