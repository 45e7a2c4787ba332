// The sandboxed program's environment: fixed base, proxy variables, --env additions, refusals.
#include "sluice/runner/environment.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using sluice::runner::buildEnvironment;

namespace {

bool has(const std::vector<std::string>& env, const std::string& kv) {
  return std::find(env.begin(), env.end(), kv) != env.end();
}

TEST(Environment, FixedBaseWithoutNetwork) {
  auto env = buildEnvironment({}, false);
  ASSERT_TRUE(env);
  EXPECT_TRUE(has(*env, "HOME=/work"));
  EXPECT_TRUE(has(*env, "TMPDIR=/tmp"));
  EXPECT_TRUE(has(*env, "LANG=C.UTF-8"));
  EXPECT_TRUE(has(*env, std::string("PATH=") + sluice::runner::kSandboxPath));
  EXPECT_TRUE(has(*env, "AWS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt"));
  for (const auto& kv : *env) EXPECT_EQ(kv.find("PROXY"), std::string::npos) << kv;
}

TEST(Environment, ProxyVariablesPointAtTheSandboxListener) {
  auto env = buildEnvironment({}, true);
  ASSERT_TRUE(env);
  for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"})
    EXPECT_TRUE(has(*env, std::string(k) + "=http://127.0.0.1:3128")) << k;
  EXPECT_TRUE(has(*env, "NO_PROXY="));
}

TEST(Environment, NothingFromTheHost) {
  ::setenv("SLUICE_TEST_HOST_SECRET", "hunter2", 1);
  auto env = buildEnvironment({}, true);
  ASSERT_TRUE(env);
  for (const auto& kv : *env) EXPECT_EQ(kv.find("hunter2"), std::string::npos);
}

TEST(Environment, ExtraVariablesAreAdded) {
  auto env = buildEnvironment({"FOO=bar", "EMPTY=", "X_1=a=b"}, false);
  ASSERT_TRUE(env);
  EXPECT_TRUE(has(*env, "FOO=bar"));
  EXPECT_TRUE(has(*env, "EMPTY="));
  EXPECT_TRUE(has(*env, "X_1=a=b"));
}

TEST(Environment, RefusesMalformedDuplicateAndFixed) {
  EXPECT_FALSE(buildEnvironment({"NOEQUALS"}, false));
  EXPECT_FALSE(buildEnvironment({"=x"}, false));
  EXPECT_FALSE(buildEnvironment({"1BAD=x"}, false));
  EXPECT_FALSE(buildEnvironment({"BAD-NAME=x"}, false));
  EXPECT_FALSE(buildEnvironment({"A=1", "A=2"}, false));
  auto r = buildEnvironment({"HTTPS_PROXY=http://evil:1"}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("HTTPS_PROXY"), std::string::npos);
  EXPECT_FALSE(buildEnvironment({"PATH=/tmp"}, false));
}

}  // namespace
