// A policy's `sandbox.mounts` reach every kind of sandbox the same way: a one-shot run (sluice
// run, a cold API run) and a session sandbox (session execs, pooled runs, MCP) both see the
// host path read-only and list it in the receipt. Needs root (skipped otherwise, except in CI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "isolation.hpp"
#include "sluice/execution/sandbox.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"

namespace sluice::execution {
namespace {

namespace fs = std::filesystem;

class HostMounts : public ::testing::TestWithParam<SandboxKind> {
 protected:
  void SetUp() override {
    dir_ = fs::path("/tmp") / ("sluice-exec-mounts-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "f") << "from the host\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_P(HostMounts, AreReadOnlyAndListedInTheReceipt) {
  REQUIRE_SANDBOX();
  const std::string yaml =
      "apiVersion: sluice/v1\nkind: Workflow\nname: mounts\n"
      "sandbox:\n  timeout: 30s\n  network: none\n  mounts:\n"
      "    - {source: " +
      dir_.string() + ", target: /mnt/data}\n";
  auto w = policy::parseWorkflow(yaml, "mounts.yaml");
  ASSERT_TRUE(w) << w.error().str();
  Services services;  // no proxy, store or CA: network none, nothing recorded
  auto box = Sandbox::open(
      services, {std::make_shared<const policy::Workflow>(std::move(*w)), GetParam(), ""});
  ASSERT_TRUE(box) << box.error().text();
  Command cmd;
  cmd.argv = {"/bin/sh", "-c", "cat /mnt/data/f; touch /mnt/data/g 2>/dev/null || echo ro"};
  auto r = GetParam() == SandboxKind::kSession ? (*box)->runOnce(cmd, {}) : (*box)->exec(cmd);
  ASSERT_TRUE(r) << r.error().text();
  EXPECT_EQ(r->result.out.text, "from the host\nro\n");
  ASSERT_TRUE(r->json.contains("mounts")) << r->json.dump();
  EXPECT_EQ(r->json["mounts"][0]["source"], dir_.string());
  EXPECT_EQ(r->json["mounts"][0]["target"], "/mnt/data");
  (*box)->close();
  EXPECT_FALSE(fs::exists(dir_ / "g"));
}

// The secrets this process holds are never a mount's source: not the secrets file's directory
// (nor anything holding it), not a `file:` secret. `policy check` cannot know where they are,
// so opening the sandbox refuses, before anything runs.
TEST_P(HostMounts, NeverShowTheSecretsFileOrASecretsFile) {
  REQUIRE_SANDBOX();
  const fs::path keys = dir_ / "keys";
  fs::create_directories(keys);
  std::ofstream(keys / "token") << "s3cr3t-value\n";
  std::ofstream(dir_ / "secrets.yaml") << "token: {file: " << (keys / "token").string() << "}\n";
  fs::permissions(dir_ / "secrets.yaml", fs::perms::owner_read | fs::perms::owner_write);
  auto store = policy::loadSecretStore(dir_ / "secrets.yaml");
  ASSERT_TRUE(store) << store.error().message;
  Services services;
  services.secrets = *store;
  for (const fs::path& source : {dir_, keys, dir_.parent_path()}) {
    const std::string yaml =
        "apiVersion: sluice/v1\nkind: Workflow\nname: mounts\n"
        "sandbox:\n  timeout: 30s\n  network: none\n  mounts:\n"
        "    - {source: " +
        source.string() + ", target: /mnt/data}\n";
    auto w = policy::parseWorkflow(yaml, "mounts.yaml");
    ASSERT_TRUE(w) << source << ": " << w.error().str();
    auto box = Sandbox::open(
        services, {std::make_shared<const policy::Workflow>(std::move(*w)), GetParam(), ""});
    ASSERT_FALSE(box) << source << " was mounted";
    EXPECT_NE(box.error().message.find("sandbox.mounts: source " + source.string()),
              std::string::npos)
        << box.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKind, HostMounts,
                         ::testing::Values(SandboxKind::kOneShot, SandboxKind::kSession),
                         [](const auto& info) {
                           return info.param == SandboxKind::kSession ? std::string("Session")
                                                                      : std::string("OneShot");
                         });

}  // namespace
}  // namespace sluice::execution
