// A session exec's argv, environment and working directory as they travel to the session's
// init in a memfd: decoded in place, and anything that is not such a blob refused.
#include "exec_request.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace sluice::runner::detail;

namespace {

TEST(ExecRequest, RoundTripsArgvEnvAndCwd) {
  std::string blob = encodeExecBlob({"/bin/sh", "-c", "echo hi", ""}, {"A=1", "B="}, "/tmp");
  ExecArgs args;
  ASSERT_TRUE(decodeExecBlob(blob.data(), blob.size(), args));
  EXPECT_STREQ(args.cwd, "/tmp");
  ASSERT_NE(args.argv, nullptr);
  EXPECT_STREQ(args.argv[0], "/bin/sh");
  EXPECT_STREQ(args.argv[2], "echo hi");
  EXPECT_STREQ(args.argv[3], "");
  EXPECT_EQ(args.argv[4], nullptr);
  EXPECT_STREQ(args.envp[0], "A=1");
  EXPECT_STREQ(args.envp[1], "B=");
  EXPECT_EQ(args.envp[2], nullptr);
}

TEST(ExecRequest, RefusesWhatIsNotABlob) {
  const std::string good = encodeExecBlob({"true"}, {"A=1"}, "/work");
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::string cut = good.substr(0, n);
    ExecArgs args;
    EXPECT_FALSE(decodeExecBlob(cut.data(), cut.size(), args)) << n;
  }
  std::string extra = good + "x";
  ExecArgs args;
  EXPECT_FALSE(decodeExecBlob(extra.data(), extra.size(), args));
  std::string no_argv = encodeExecBlob({}, {}, "/work");
  EXPECT_FALSE(decodeExecBlob(no_argv.data(), no_argv.size(), args));
  std::string bad_magic = good;
  bad_magic[0] ^= 1;
  EXPECT_FALSE(decodeExecBlob(bad_magic.data(), bad_magic.size(), args));
  std::string huge_count = good;
  huge_count[8] = '\x7f';  // argc
  EXPECT_FALSE(decodeExecBlob(huge_count.data(), huge_count.size(), args));
}

}  // namespace
