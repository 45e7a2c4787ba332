// The outcome of a program's run (see outcome.hpp).
#include "outcome.hpp"

#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include <algorithm>
#include <string>

namespace sluice::runner::detail {

CgroupStats countersSince(const CgroupStats& now, const CgroupStats& before) {
  auto since = [](std::uint64_t n, std::uint64_t b) { return n > b ? n - b : 0; };
  CgroupStats d = now;
  d.oom_kills = since(now.oom_kills, before.oom_kills);
  d.pids_max_events = since(now.pids_max_events, before.pids_max_events);
  d.cpu_usage_us = since(now.cpu_usage_us, before.cpu_usage_us);
  d.memory_failcnt = since(now.memory_failcnt, before.memory_failcnt);
  return d;
}

bool acceptReportLostToOom(Supervised& sup, const CgroupStats& counters) {
  if (sup.child_error || sup.have_report || sup.stop == StopReason::kRequest ||
      counters.oom_kills == 0)
    return false;
  sup.report = InitReport{};
  sup.report.wait_status = SIGKILL;  // as waitpid reports "killed by signal 9"
  sup.report.program_started = 1;
  sup.have_report = true;
  return true;
}

namespace {
bool lowOnScratch(const struct statvfs& sv) {
  return static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize < (64u << 10) || sv.f_favail == 0;
}
}  // namespace

bool scratchFull(pid_t init) {
  const std::string work = "/proc/" + std::to_string(init) + "/root/work";
  struct statvfs sv {};
  return ::statvfs(work.c_str(), &sv) == 0 && lowOnScratch(sv);
}

bool scratchFullAt(int work_fd) {
  struct statvfs sv {};
  return work_fd >= 0 && ::fstatvfs(work_fd, &sv) == 0 && lowOnScratch(sv);
}

namespace {

std::uint64_t millis(const timeval& tv) {
  return static_cast<std::uint64_t>(tv.tv_sec) * 1000 +
         static_cast<std::uint64_t>(tv.tv_usec) / 1000;
}

LimitHit whichLimit(const Supervised& sup, const RunResult& r, const CgroupStats& c,
                    std::uint64_t cpu_limit_us, bool disk_full) {
  const std::uint64_t cpu_used_us =
      std::max<std::uint64_t>(c.cpu_usage_us, (r.usage.cpu_user_ms + r.usage.cpu_sys_ms) * 1000);
  if (sup.stop == StopReason::kTimeout) return LimitHit::kTimeout;
  if (sup.stop == StopReason::kCpu || r.signal == SIGXCPU ||
      (r.signal == SIGKILL && cpu_limit_us > 0 && cpu_used_us >= cpu_limit_us))
    return LimitHit::kCpu;
  if (c.oom_kills > 0) return LimitHit::kMemory;
  if (r.signal == SIGXFSZ) return LimitHit::kFileSize;
  if (c.pids_max_events > 0) return LimitHit::kPids;
  if (disk_full) return LimitHit::kDisk;
  if (r.out.truncated || r.err.truncated) return LimitHit::kOutput;
  return LimitHit::kNone;
}

}  // namespace

void fillOutcome(Supervised& sup, const CgroupStats& counters, const Limits& limits, bool disk_full,
                 RunResult& result) {
  const int ws = sup.report.wait_status;
  if (WIFEXITED(ws)) result.exit_code = WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) result.signal = WTERMSIG(ws);
  const rusage& ru = sup.report.children;
  result.usage.cpu_user_ms = millis(ru.ru_utime);
  result.usage.cpu_sys_ms = millis(ru.ru_stime);
  result.usage.max_rss_bytes = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
  result.usage.pids_peak =
      std::max<std::uint64_t>({counters.pids_peak, sup.pids_sampled, std::uint64_t{1}});
  result.out = std::move(sup.out);
  result.err = std::move(sup.err);
  if (sup.stop == StopReason::kRequest) {
    result.stopped_by_request = true;
    result.stop_signal = sup.stop_signal;
  }
  const auto cpu_limit_us = static_cast<std::uint64_t>(limits.cpu_time.count()) * 1000;
  result.limit_hit = whichLimit(sup, result, counters, cpu_limit_us, disk_full);
}

Isolation isolationOf(const Launched& l, uid_t uid, gid_t gid) {
  Isolation iso;
  iso.namespaces = {"mount", "pid", "net", "ipc", "uts", "cgroup"};
  if (l.user_namespace) iso.namespaces.push_back("user");
  iso.seccomp = true;
  iso.landlock = l.landlock_abi > 0;
  iso.no_new_privs = true;
  iso.uid = uid;
  iso.gid = gid;
  iso.cgroup = !l.layout ? "none" : l.layout->version == CgroupVersion::kV2 ? "v2" : "v1";
  return iso;
}

base::Error failureOf(const Supervised& sup) {
  if (sup.child_error) return *sup.child_error;
  if (sup.stop == StopReason::kRequest)
    return setupError("stopped", "sluice was asked to stop during setup");
  return setupError("sandbox init", "the sandbox's init died without a report");
}

}  // namespace sluice::runner::detail
