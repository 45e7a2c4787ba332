// Command-line overrides may only tighten the workflow's limits.
#include "sluice/runner/limits.hpp"

#include <gtest/gtest.h>

using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

TEST(Limits, TighterValuesApply) {
  Limits base;
  LimitOverrides o;
  o.timeout = 5s;
  o.memory = 128ull << 20;
  o.pids = 8;
  o.file_size = 1 << 20;
  auto r = applyOverrides(base, o);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->timeout, 5s);
  EXPECT_EQ(r->memory, 128ull << 20);
  EXPECT_EQ(r->pids, 8u);
  EXPECT_EQ(r->file_size, 1u << 20);
  EXPECT_EQ(r->cpu_time, base.cpu_time);  // untouched
}

TEST(Limits, EqualValueIsAllowed) {
  Limits base;
  LimitOverrides o;
  o.memory = base.memory;
  EXPECT_TRUE(applyOverrides(base, o));
}

TEST(Limits, LooserValueIsAnErrorNamingTheOption) {
  Limits base;
  base.memory = 512ull << 20;
  LimitOverrides o;
  o.memory = 1ull << 30;
  auto r = applyOverrides(base, o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(),
            "--memory 1GiB is looser than the workflow's 512MiB (overrides may only tighten)");
  LimitOverrides t;
  t.timeout = 1h;
  auto rt = applyOverrides(base, t);
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.error().find("--timeout"), std::string::npos);
}

TEST(Limits, ZeroMeansUnlimitedAndIsLooser) {
  Limits base;
  LimitOverrides o;
  o.pids = 0;
  EXPECT_FALSE(applyOverrides(base, o));
  base.pids = 0;  // workflow says unlimited: anything tightens
  o.pids = 10;
  auto r = applyOverrides(base, o);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pids, 10u);
}

TEST(Limits, FileSizeDefaultsToDisk) {
  Limits base;
  base.disk = 100ull << 20;
  base.file_size = 0;
  LimitOverrides o;
  o.file_size = 200ull << 20;
  EXPECT_FALSE(applyOverrides(base, o));
  o.file_size = 50ull << 20;
  EXPECT_TRUE(applyOverrides(base, o));
}

TEST(Limits, Formatting) {
  EXPECT_EQ(formatBytes(512ull << 20), "512MiB");
  EXPECT_EQ(formatBytes(1000), "1000B");
  EXPECT_EQ(formatBytes(0), "unlimited");
  EXPECT_EQ(formatMillis(30s), "30s");
  EXPECT_EQ(formatMillis(1500ms), "1500ms");
}

}  // namespace
