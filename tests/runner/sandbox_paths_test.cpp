// RunSpec::files: sandbox paths confined to /work, /tmp and /output (parseScratchPath), and
// files placed in a real sandbox with their content, mode and owner before the program starts.
#include "sandbox_paths.hpp"

#include <gtest/gtest.h>

#include <atomic>

#include "isolation.hpp"
#include "sluice/runner/sandbox.hpp"

using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

RunSpec shell(const std::string& script) {
  static std::atomic<int> n{0};
  RunSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.execution_id = "t-files-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  s.limits.timeout = 20s;
  return s;
}

TEST(ScratchPath, AcceptsPathsUnderWorkTmpAndOutput) {
  auto p = detail::parseScratchPath("/work//sub/./");
  EXPECT_FALSE(p);  // "." is refused, not normalised away
  p = detail::parseScratchPath("/work//sub/a.py/");
  ASSERT_TRUE(p) << p.error();
  EXPECT_EQ(p->top, "work");
  EXPECT_EQ(p->parts, (std::vector<std::string>{"sub", "a.py"}));
  EXPECT_EQ(p->sandbox(), "/work/sub/a.py");
  EXPECT_EQ(p->relative(), "work/sub/a.py");
  p = detail::parseScratchPath("/output");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->parts.empty());
  EXPECT_TRUE(detail::parseScratchPath("/tmp/x"));
}

TEST(ScratchPath, RefusesEverythingElse) {
  for (const char* bad :
       {"work/a", "", "/", "/etc/passwd", "/input/a", "/workx/a", "/work/../etc/passwd",
        "/work/a/../../etc", "/tmp/..", "/output/./a", "/dev/shm/a", "/proc/1/root"})
    EXPECT_FALSE(detail::parseScratchPath(bad)) << bad;
  EXPECT_FALSE(detail::parseScratchPath(std::string("/work/a\0b", 9)));
  EXPECT_FALSE(detail::parseScratchPath("/work/" + std::string(256, 'a')));
  EXPECT_FALSE(detail::parseScratchPath("/work/" + std::string(4096, 'a')));
}

TEST(SandboxFiles, AppearWithContentModeAndOwner) {
  REQUIRE_SANDBOX();
  RunSpec s = shell(
      "cd /work && ./run.sh; for f in /work/run.sh /work/deep/er/data.txt /tmp/secret /output/o; "
      "do stat -c '%n %a %u %g %s' $f; done; stat -c '%n %a %u %g' /work/deep /work/deep/er; "
      "cat /work/deep/er/data.txt; "
      "echo more >> /work/deep/er/data.txt && echo appended");
  s.files = {{"/work/run.sh", "#!/bin/sh\necho from-file\n", 0755},
             {"/work/deep/er/data.txt", "a,b\n", 0644},
             {"/tmp/secret", "s", 0600},
             {"/output/o", "out", 0640}};
  auto r = runSandboxed(s);
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->err.text;
  EXPECT_EQ(r->out.text,
            "from-file\n"
            "/work/run.sh 755 65534 65534 25\n"
            "/work/deep/er/data.txt 644 65534 65534 4\n"
            "/tmp/secret 600 65534 65534 1\n"
            "/output/o 640 65534 65534 3\n"
            "/work/deep 755 65534 65534\n"
            "/work/deep/er 755 65534 65534\n"
            "a,b\nappended\n")
      << r->err.text;
  ASSERT_EQ(r->artifacts.size(), 1u);
  EXPECT_EQ(r->artifacts[0].path, "o");
}

TEST(SandboxFiles, PathsOutsideTheScratchSpaceAreASetupError) {
  REQUIRE_SANDBOX();
  const std::vector<std::vector<SandboxFile>> bad = {
      {{"/etc/passwd", "x"}},
      {{"/work/../etc/passwd", "x"}},
      {{"/work/a/../../etc/x", "x"}},
      {{"work/relative", "x"}},
      {{"/input/a", "x"}},
      {{"/work", "x"}},
      {{"/usr/bin/evil", "x"}},
      {{"/work/a", "x"}, {"/work/a", "y"}},
      {{"/work/a", "x"}, {"/work/a/b", "y"}},
      {{"/work/a/b", "x"}, {"/work/a", "y"}},
      {{"/work/a", "x", 010000}},
  };
  for (const auto& files : bad) {
    RunSpec s = shell("echo SHOULD-NOT-RUN");
    s.files = files;
    auto r = runSandboxed(s);
    ASSERT_FALSE(r) << files[0].path;
    EXPECT_EQ(r.error().where, "sandbox file") << files[0].path;
    EXPECT_EQ(sluice::base::exitStatus(r.error().code), 125);
  }
}

TEST(SandboxFiles, MoreThanTheDiskLimitFailsNamingTheStep) {
  REQUIRE_SANDBOX();
  RunSpec s = shell("echo SHOULD-NOT-RUN");
  s.limits.disk = 1 << 20;
  s.files = {{"/work/big", std::string(2 << 20, 'x')}};
  auto r = runSandboxed(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().where, "write sandbox file") << r.error().message;
}

}  // namespace
