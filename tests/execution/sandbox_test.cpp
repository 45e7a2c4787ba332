// execution::Sandbox's checks, the same for every surface (sluice run, serve's runs, pooled
// runs and session execs, sluice mcp): a command may not set a placeholder's variable or
// loosen a limit, and an upstream CA must be a readable file (serve used to hand a FIFO to
// OpenSSL and hang at start-up; now it is refused as `sluice run` refuses it).
#include "sluice/execution/sandbox.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/tunnel.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::execution {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPolicy =
    "apiVersion: sluice/v1\nkind: Workflow\nname: placeholders\n"
    "sandbox:\n  timeout: 60s\n  memory: 256MiB\n  network: proxy\n"
    "egress:\n  rules:\n"
    "    - id: api\n      action: allow\n      hosts: [api.example.com]\n      tls: inspect\n"
    "      inject:\n        headers:\n"
    "          Authorization: \"Bearer ${secret:api_token}\"\n"
    "        placeholder_env: API_TOKEN\n";

class SandboxCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = policy::parseWorkflow(kPolicy, "placeholders.yaml");
    ASSERT_TRUE(w) << w.error().str();
    auto opened = Sandbox::open(services_, {std::make_shared<const policy::Workflow>(std::move(*w)),
                                            SandboxKind::kOneShot, ""});
    ASSERT_TRUE(opened) << opened.error().text();
    sandbox_ = std::move(*opened);
  }

  Services services_;  // no proxy, store or CA: nothing here runs
  std::unique_ptr<Sandbox> sandbox_;
};

TEST_F(SandboxCheck, APlaceholdersVariableCannotBeGiven) {
  Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.env = {"OTHER=1", "API_TOKEN=mine"};
  auto r = sandbox_->check(cmd);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, base::Code::kInvalidArgument);
  EXPECT_EQ(r.error().where, "env");
  EXPECT_NE(r.error().message.find("API_TOKEN: set by rule 'api'"), std::string::npos)
      << r.error().message;
  // Refused by exec too, before anything runs.
  auto ran = sandbox_->exec(cmd);
  ASSERT_FALSE(ran);
  EXPECT_EQ(ran.error().where, "env");
  cmd.env = {"OTHER=1"};
  EXPECT_TRUE(sandbox_->check(cmd)) << sandbox_->check(cmd).error().text();
}

TEST_F(SandboxCheck, ARunnerVariableAndALooserLimitAreRefused) {
  Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.env = {"HTTPS_PROXY=http://elsewhere:3128"};
  EXPECT_FALSE(sandbox_->check(cmd));
  cmd.env.clear();
  cmd.limits.timeout = std::chrono::minutes(5);  // the workflow says 60s
  auto r = sandbox_->check(cmd);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().where, "limits");
  cmd.limits.timeout = std::chrono::seconds(5);
  EXPECT_TRUE(sandbox_->check(cmd));
}

// inject.aws_sigv4's stand-ins are placeholders like any other: a command cannot set them.
// matcher() is the policy in force: after a live update (replacePolicy) it is the new one, which
// explains refusals; a failed update leaves it as it was.
TEST(SandboxPolicy, MatcherIsThePolicyInForceAfterALiveUpdate) {
  auto parse = [](const std::string& rules) {
    auto w = policy::parseWorkflow(
        "apiVersion: sluice/v1\nkind: Workflow\nname: live\nsandbox:\n  network: proxy\n"
        "egress:\n  rules:\n" +
            rules,
        "live.yaml");
    EXPECT_TRUE(w) << w.error().str();
    return std::make_shared<const policy::Workflow>(std::move(*w));
  };
  auto first = parse("    - {id: api, action: allow, hosts: [api.example.com], ports: [443]}\n");
  auto narrower = policy::Matcher::compile(
      parse("    - {id: api, action: deny, hosts: [api.example.com], ports: [443]}\n"));
  auto px = proxy::Proxy::create({}, nullptr, nullptr);
  ASSERT_TRUE(px) << px.error().message;
  Services services;
  services.proxy = px->get();
  auto opened = Sandbox::open(services, {first, SandboxKind::kOneShot, ""});
  ASSERT_TRUE(opened) << opened.error().text();
  Sandbox& sandbox = **opened;
  const auto original = sandbox.matcher();
  EXPECT_EQ(original->workflow().sha256, first->sha256);
  // No listener of its yet: nothing to update, matcher() unchanged.
  EXPECT_FALSE(sandbox.replacePolicy(narrower));
  EXPECT_EQ(sandbox.matcher(), original);
  // Its listener (what its network start makes), then the update.
  ASSERT_TRUE((*px)->listen("127.0.0.1", 0, proxy::ListenerIdentity{sandbox.id(), original}));
  auto g = sandbox.replacePolicy(narrower);
  ASSERT_TRUE(g) << g.error().text();
  EXPECT_EQ(*g, 2u);
  EXPECT_EQ(sandbox.matcher(), narrower);
  const auto d =
      policy::decideTunnel(*sandbox.matcher(), *policy::makeTarget("api.example.com", 443));
  EXPECT_FALSE(d.decision.allowed);
  EXPECT_EQ(d.decision.rule_id, "api");
  EXPECT_EQ(sandbox.workflow().sha256, first->sha256);  // the workflow it was built with
  (*px)->stop();
}

TEST(SandboxAwsSigv4, ItsVariablesCannotBeGiven) {
  auto w = policy::parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: s3\nsandbox:\n  network: proxy\n"
      "egress:\n  rules:\n"
      "    - id: s3\n      action: allow\n      hosts: [s3.example]\n      tls: inspect\n"
      "      inject:\n        aws_sigv4:\n          access_key_id: ${secret:id}\n"
      "          secret_access_key: ${secret:key}\n",
      "s3.yaml");
  ASSERT_TRUE(w) << w.error().str();
  Services services;
  auto opened = Sandbox::open(services, {std::make_shared<const policy::Workflow>(std::move(*w)),
                                         SandboxKind::kOneShot, ""});
  ASSERT_TRUE(opened) << opened.error().text();
  Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.env = {"AWS_SECRET_ACCESS_KEY=mine"};
  auto r = (*opened)->check(cmd);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("AWS_SECRET_ACCESS_KEY: set by rule 's3' (inject.aws_sigv4)"),
            std::string::npos)
      << r.error().message;
  cmd.env = {"AWS_REGION=eu-west-3"};
  EXPECT_TRUE((*opened)->check(cmd));
}

TEST(UpstreamCas, EachMustBeAReadableRegularFile) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-exec-ca-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ca.pem") << "not parsed here\n";
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(checkUpstreamCas({(dir / "ca.pem").string()}));
  for (const fs::path& bad : {dir / "missing.pem", dir / "fifo", dir}) {
    auto r = checkUpstreamCas({(dir / "ca.pem").string(), bad.string()});
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().where, "upstream CA");
    EXPECT_NE(r.error().message.find(bad.string()), std::string::npos) << r.error().message;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::execution
