// Control groups for one execution: memory (swap included), pids and CPU accounting, on cgroup
// v1 (one hierarchy per controller) or v2 (unified). The root is a parameter so the logic is
// tested against a fake cgroupfs directory. Counters come from the kernel's own files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {

enum class CgroupVersion : std::uint8_t { kV1, kV2 };

struct CgroupLayout {
  CgroupVersion version = CgroupVersion::kV2;
  std::filesystem::path root;  // v2: the unified mount; v1: the dir holding memory/, pids/, ...
  // v1 only: the hierarchy directories of each controller we use.
  std::filesystem::path memory_dir, pids_dir, cpuacct_dir;
  std::string parent = "sluice";  // every execution's cgroup lives under <root>/<parent>/
};

/// Finds the cgroup layout under `root` (default /sys/fs/cgroup): v2 when `root` is a unified
/// hierarchy with the memory and pids controllers available, else v1 when the memory, pids and
/// cpuacct hierarchies are mounted. A hybrid system (empty cgroup2 at unified/) counts as v1.
std::expected<CgroupLayout, std::string> detectCgroupLayout(
    const std::filesystem::path& root = "/sys/fs/cgroup");

/// The kernel's counters for one execution's cgroup.
struct CgroupStats {
  std::uint64_t oom_kills = 0;        // memory.events oom_kill (v2) / memory.oom_control (v1)
  std::uint64_t pids_max_events = 0;  // pids.events "max": forks refused by pids.max
  std::uint64_t cpu_usage_us = 0;     // cpu.stat usage_usec (v2) / cpuacct.usage (v1)
  std::uint64_t memory_peak = 0;      // memory.peak (v2) / memory.max_usage_in_bytes (v1)
  std::uint64_t pids_current = 0;
  std::uint64_t pids_peak = 0;       // pids.peak when the kernel has it, else 0
  std::uint64_t memory_failcnt = 0;  // v1 memory.failcnt (limit reached; reclaim or OOM)
};

/// One execution's cgroup(s). Move-only; remove() must be called (the destructor tries too).
class Cgroup {
 public:
  /// Creates <parent>/<name> in each hierarchy and writes the limits. On failure everything
  /// created is removed again and the error names the file that could not be written.
  static base::Result<Cgroup> create(const CgroupLayout& layout, std::string_view name,
                                     const Limits& limits);
  Cgroup(Cgroup&& other) noexcept;
  Cgroup& operator=(Cgroup&& other) noexcept;
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;
  ~Cgroup();

  /// Moves `pid` into the cgroup (every hierarchy on v1).
  base::Result<void> addProcess(pid_t pid) const;
  /// Reads the counters; missing files read as 0. The counter files are opened on the first
  /// call and kept open (each later call is one pread per file); a file missing then stays 0.
  CgroupStats stats() const;
  /// SIGKILLs every process in the cgroup (cgroup.kill on v2 where present), bounded retries.
  void killAll() const;
  /// Removes the cgroup directories (kills what is left first). Idempotent.
  std::expected<void, std::string> remove();

  /// The directories making up this cgroup (one on v2, one per controller on v1).
  const std::vector<std::filesystem::path>& dirs() const { return dirs_; }
  CgroupVersion version() const { return version_; }

 private:
  Cgroup() = default;
  CgroupVersion version_ = CgroupVersion::kV2;
  std::vector<std::filesystem::path> dirs_;  // v1: memory, pids, cpuacct (in that order)
  bool removed_ = true;
  struct CounterFiles;                      // cgroup.cpp
  std::unique_ptr<CounterFiles> counters_;  // made by create(), filled by the first stats()
};

/// Start time of `pid` (clock ticks since boot, /proc/PID/stat field 22), if it exists.
std::optional<std::uint64_t> processStartTime(pid_t pid);

/// The cgroup name of one execution: "<pid>.<start time>.<execution id>", so `sluice gc` can
/// tell leftovers (owner gone, or pid reused) from live runs.
std::string cgroupName(std::string_view execution_id);

/// Processes listed in a cgroup directory's cgroup.procs.
std::vector<pid_t> cgroupProcs(const std::filesystem::path& dir);

/// Reads "key value" lines (memory.events, pids.events, cpu.stat, memory.oom_control).
std::optional<std::uint64_t> readKeyedCounter(const std::filesystem::path& file,
                                              std::string_view key);

}  // namespace sluice::runner
