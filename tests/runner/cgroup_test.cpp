// Cgroup v1 and v2 logic against fake cgroupfs directory trees: detection, the files and values
// written for limits, counters read back, and removal.
#include "sluice/runner/cgroup.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace sluice::runner;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}
void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class FakeCgroupFs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sluice-cgfs-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // Real cgroupfs lets rmdir remove a directory full of control files; a fake one does not.
  void emptyDirs(const Cgroup& cg) {
    for (const auto& d : cg.dirs())
      for (const auto& e : fs::directory_iterator(d)) fs::remove(e.path());
  }
  fs::path root_;
};

TEST_F(FakeCgroupFs, DetectsV2WithMemoryAndPids) {
  put(root_ / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->version, CgroupVersion::kV2);
}

TEST_F(FakeCgroupFs, V2WithoutMemoryControllerIsAnError) {
  put(root_ / "cgroup.controllers", "cpu io\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().find("memory"), std::string::npos);
}

TEST_F(FakeCgroupFs, HybridIsV1) {
  put(root_ / "unified" / "cgroup.controllers", "");
  put(root_ / "memory" / "memory.limit_in_bytes", "9223372036854771712\n");
  put(root_ / "pids" / "cgroup.procs", "");
  put(root_ / "cpu,cpuacct" / "cpuacct.usage", "0\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->version, CgroupVersion::kV1);
  EXPECT_EQ(layout->cpuacct_dir, root_ / "cpu,cpuacct");
}

TEST_F(FakeCgroupFs, NothingMountedIsAnError) { EXPECT_FALSE(detectCgroupLayout(root_)); }

TEST_F(FakeCgroupFs, V2CreateWritesLimitsAndEnablesControllers) {
  put(root_ / "cgroup.controllers", "cpu memory pids\n");
  put(root_ / "cgroup.subtree_control", "");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout);
  Limits l;
  l.memory = 256ull << 20;
  l.pids = 32;
  auto cg = Cgroup::create(*layout, "123.ex-1", l);
  ASSERT_TRUE(cg) << cg.error().message;
  const fs::path dir = root_ / "sluice" / "123.ex-1";
  ASSERT_EQ(cg->dirs().size(), 1u);
  EXPECT_EQ(cg->dirs()[0], dir);
  EXPECT_EQ(slurp(dir / "memory.max"), std::to_string(256ull << 20));
  EXPECT_EQ(slurp(dir / "memory.swap.max"), "0");  // swap included in the memory budget
  EXPECT_EQ(slurp(dir / "pids.max"), "32");
  EXPECT_EQ(slurp(dir / "memory.oom.group"), "1");
  EXPECT_EQ(slurp(root_ / "cgroup.subtree_control"), "+memory +pids +cpu");
  emptyDirs(*cg);
  EXPECT_TRUE(cg->remove());
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(FakeCgroupFs, V2UnlimitedIsMax) {
  put(root_ / "cgroup.controllers", "memory pids\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout);
  Limits l;
  l.memory = 0;
  l.pids = 0;
  auto cg = Cgroup::create(*layout, "1.x", l);
  ASSERT_TRUE(cg);
  EXPECT_EQ(slurp(cg->dirs()[0] / "memory.max"), "max");
  EXPECT_EQ(slurp(cg->dirs()[0] / "pids.max"), "max");
  emptyDirs(*cg);
}

TEST_F(FakeCgroupFs, V2StatsComeFromKernelFiles) {
  put(root_ / "cgroup.controllers", "memory pids cpu\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout);
  auto cg = Cgroup::create(*layout, "7.y", Limits{});
  ASSERT_TRUE(cg);
  const fs::path d = cg->dirs()[0];
  put(d / "memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n");
  put(d / "pids.events", "max 5\n");
  put(d / "cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n");
  put(d / "memory.peak", "4096\n");
  put(d / "pids.current", "3\n");
  put(d / "pids.peak", "9\n");
  CgroupStats s = cg->stats();
  EXPECT_EQ(s.oom_kills, 1u);
  EXPECT_EQ(s.pids_max_events, 5u);
  EXPECT_EQ(s.cpu_usage_us, 1500000u);
  EXPECT_EQ(s.memory_peak, 4096u);
  EXPECT_EQ(s.pids_current, 3u);
  EXPECT_EQ(s.pids_peak, 9u);
  // The files stay open after the first read: a later read sees the values as they are then.
  put(d / "pids.current", "4\n");
  put(d / "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n");
  s = cg->stats();
  EXPECT_EQ(s.pids_current, 4u);
  EXPECT_EQ(s.cpu_usage_us, 2500000u);
  EXPECT_EQ(s.oom_kills, 1u);
  emptyDirs(*cg);
}

TEST_F(FakeCgroupFs, V2KillUsesCgroupKill) {
  put(root_ / "cgroup.controllers", "memory pids\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout);
  auto cg = Cgroup::create(*layout, "9.k", Limits{});
  ASSERT_TRUE(cg);
  put(cg->dirs()[0] / "cgroup.kill", "");
  put(cg->dirs()[0] / "cgroup.procs", "");  // empty: nothing to signal by hand
  cg->killAll();
  EXPECT_EQ(slurp(cg->dirs()[0] / "cgroup.kill"), "1");
  emptyDirs(*cg);
}

TEST_F(FakeCgroupFs, V2CreateFailureNamesTheFileAndCleansUp) {
  put(root_ / "cgroup.controllers", "memory pids\n");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout);
  // The same execution twice: mkdir fails and the error names the cgroup step.
  fs::create_directories(root_ / "sluice");
  auto first = Cgroup::create(*layout, "dup", Limits{});
  ASSERT_TRUE(first);
  auto second = Cgroup::create(*layout, "dup", Limits{});
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().where.find("cgroup"), std::string::npos);
  EXPECT_EQ(sluice::base::exitStatus(second.error().code), 125);
  emptyDirs(*first);
}

TEST_F(FakeCgroupFs, V1CreatesOneCgroupPerHierarchy) {
  put(root_ / "memory" / "memory.limit_in_bytes", "");
  put(root_ / "pids" / "cgroup.procs", "");
  put(root_ / "cpuacct" / "cpuacct.usage", "");
  auto layout = detectCgroupLayout(root_);
  ASSERT_TRUE(layout);
  ASSERT_EQ(layout->version, CgroupVersion::kV1);
  Limits l;
  l.memory = 64ull << 20;
  l.pids = 16;
  auto cg = Cgroup::create(*layout, "42.ex", l);
  ASSERT_TRUE(cg) << cg.error().message;
  ASSERT_EQ(cg->dirs().size(), 3u);
  EXPECT_EQ(cg->dirs()[0], root_ / "memory" / "sluice" / "42.ex");
  EXPECT_EQ(slurp(cg->dirs()[0] / "memory.limit_in_bytes"), std::to_string(64ull << 20));
  EXPECT_EQ(slurp(cg->dirs()[0] / "memory.memsw.limit_in_bytes"), std::to_string(64ull << 20));
  EXPECT_EQ(slurp(cg->dirs()[1] / "pids.max"), "16");

  put(cg->dirs()[0] / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  put(cg->dirs()[0] / "memory.max_usage_in_bytes", "1048576\n");
  put(cg->dirs()[1] / "pids.events", "max 4\n");
  put(cg->dirs()[2] / "cpuacct.usage", "2500000000\n");
  CgroupStats s = cg->stats();
  EXPECT_EQ(s.oom_kills, 2u);
  EXPECT_EQ(s.memory_peak, 1048576u);
  EXPECT_EQ(s.pids_max_events, 4u);
  EXPECT_EQ(s.cpu_usage_us, 2500000u);  // cpuacct.usage is nanoseconds
  emptyDirs(*cg);
  EXPECT_TRUE(cg->remove());
  for (const char* h : {"memory", "pids", "cpuacct"})
    EXPECT_FALSE(fs::exists(root_ / h / "sluice" / "42.ex")) << h;
}

TEST(CgroupCounters, KeyedCounterParsing) {
  const fs::path f = fs::temp_directory_path() / ("sluice-kc-" + std::to_string(::getpid()));
  put(f, "a 1\nmax 7\nzzz 3\n");
  EXPECT_EQ(readKeyedCounter(f, "max"), 7u);
  EXPECT_EQ(readKeyedCounter(f, "missing"), std::nullopt);
  fs::remove(f);
  EXPECT_EQ(readKeyedCounter(f, "max"), std::nullopt);
}

}  // namespace
