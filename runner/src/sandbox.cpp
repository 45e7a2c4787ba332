// runSandboxed(), as a table of contents: launch (launch.cpp: plan, cgroup, init, hand-over),
// supervise (supervise.cpp: stdin, output, limits, stop requests), outcome (outcome.cpp: exit,
// usage, the limit hit; artifacts.cpp: /output), teardown. Plus the small public helpers of
// sandbox.hpp. See docs/sandbox.md.
#include "sluice/runner/sandbox.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "artifacts.hpp"
#include "input_digests.hpp"
#include "launch.hpp"
#include "outcome.hpp"
#include "supervise.hpp"

namespace sluice::runner {
namespace {

using detail::Clock;

detail::Supervised superviseRun(const RunSpec& spec, const RunHooks& hooks, detail::Launched& l) {
  detail::SuperviseSpec s;
  s.out_r = l.pipes.out_r.get();
  s.errs_r = l.pipes.errs_r.get();
  s.err_r = l.pipes.err_r.get();
  s.rep_r = l.pipes.rep_r.get();
  s.stdin_w = &l.pipes.in_w;
  s.stdin_data = spec.stdin_data;
  s.init = l.init;
  s.cgroup = l.cgroup ? &*l.cgroup : nullptr;
  s.started = l.cloned_at;
  s.timeout = spec.limits.timeout;
  s.cpu_time = spec.limits.cpu_time;
  s.output_limit = spec.limits.output;
  s.live = &hooks.live;
  s.stop_fd = hooks.stop_fd;
  s.program = spec.argv[0];
  return detail::supervise(s);
}

// /output and the scratch's fill level, read through init's root while its mount namespace
// lives (init, the only process left, idles on the control pipe).
base::Result<bool> collectScratch(const RunSpec& spec, pid_t init, RunResult& result) {
  const bool disk_full = detail::scratchFull(init);
  const std::string output = "/proc/" + std::to_string(init) + "/root/output";
  auto arts = detail::collectArtifacts(output, spec.output_dir, spec.limits.disk);
  if (!arts) return std::unexpected(detail::setupError("copy /output", arts.error()));
  result.artifacts = std::move(arts->files);
  result.artifacts_truncated = arts->truncated;
  return disk_full;
}

// After the program: init is let go as soon as /output is copied and the counters are read,
// and the result is made final before the teardown, so the caller may start committing it
// (on_result) while the namespaces and cgroups go away.
base::Result<RunResult> finishRun(const RunSpec& spec, const RunHooks& hooks, detail::Launched& l,
                                  detail::Supervised& sup, detail::PhaseClock& clock,
                                  detail::InputDigester& digester, RunResult& result) {
  bool disk_full = false;
  if (sup.have_report && !sup.child_error) {
    auto full = collectScratch(spec, l.init, result);
    if (!full) return std::unexpected(full.error());  // `l` kills init
    disk_full = *full;
  }
  const CgroupStats stats = l.cgroup ? l.cgroup->stats() : CgroupStats{};
  detail::acceptReportLostToOom(sup, stats);
  if (sup.child_error || !sup.have_report) {
    l.teardown();
    return std::unexpected(detail::failureOf(sup));
  }
  clock.mark("runner: artifacts + counters");
  // Init is not needed any more (/output copied, counters read): it exits now, and the kernel
  // tears down its namespaces and mounts while the result is made final and the caller starts
  // committing it; teardown() then finds less to wait for.
  l.releaseInit();
  result.ended_at = std::chrono::system_clock::now();
  detail::fillOutcome(sup, stats, spec.limits, disk_full, result);
  result.isolation = detail::isolationOf(l, spec.uid, spec.gid);
  if (!spec.inputs.empty()) {
    detail::InputDigests digests = digester.take();
    result.inputs = std::move(digests.files);
    result.inputs_truncated = digests.truncated;
    clock.mark("runner: waiting for input digests");
  }
  if (hooks.on_result) hooks.on_result(result);
  l.teardown();
  clock.mark("runner: teardown (namespaces, cgroups)");
  return std::move(result);
}

}  // namespace

std::string_view limitHitName(LimitHit l) {
  switch (l) {
    case LimitHit::kNone:
      return "";
    case LimitHit::kTimeout:
      return "timeout";
    case LimitHit::kCpu:
      return "cpu";
    case LimitHit::kMemory:
      return "memory";
    case LimitHit::kPids:
      return "pids";
    case LimitHit::kOutput:
      return "output";
    case LimitHit::kDisk:
      return "disk";
    case LimitHit::kFileSize:
      return "file_size";
  }
  return "";
}

int RunResult::sluiceExitStatus() const {
  if (stopped_by_request) return 128 + stop_signal;
  const bool failed = signal != 0 || exit_code != 0;
  switch (limit_hit) {
    case LimitHit::kTimeout:
    case LimitHit::kCpu:
    case LimitHit::kFileSize:
      return 124;
    case LimitHit::kMemory:
    case LimitHit::kPids:
    case LimitHit::kDisk:
      if (failed) return 124;
      break;
    case LimitHit::kOutput:
    case LimitHit::kNone:
      break;
  }
  if (signal != 0) return 128 + signal;
  return exit_code;
}

bool commandNotStarted(const base::Error& e) {
  return e.code == base::Code::kCommandNotFound || e.code == base::Code::kCannotExecute;
}

base::Error setupFailure(std::string where, base::Error cause) {
  if (base::exitStatus(cause.code) != 125) cause.code = base::Code::kIo;
  cause.where = std::move(where);
  return cause;
}

bool sandboxSupported(std::string* why) {
  if (::geteuid() != 0) {
    if (why) *why = "not root: no cgroups (runSandboxed falls back to a user namespace)";
    return false;
  }
  auto layout = detectCgroupLayout();
  if (!layout) {
    if (why) *why = layout.error();
    return false;
  }
  return true;
}

base::Result<RunResult> runSandboxed(const RunSpec& spec, const RunHooks& hooks,
                                     PreparedSandboxPtr prepared) {
  RunResult result;
  result.started_at = std::chrono::system_clock::now();
  const auto t0 = Clock::now();
  // The inputs are hashed alongside the sandbox's start and the program's run (input_digests.hpp);
  // a run that ends early stops and joins the thread on return.
  detail::InputDigester digester(spec.inputs);
  detail::PhaseClock clock(result.phases);
  auto launched = detail::launchSandbox(spec, hooks, std::move(prepared), clock);
  if (!launched) return std::unexpected(launched.error());
  detail::Launched& l = **launched;
  detail::Supervised sup = superviseRun(spec, hooks, l);
  if (sup.exec_at != Clock::time_point::max())
    clock.markAt("runner: sandbox setup until execve", sup.exec_at);
  clock.mark("runner: program run + reap");
  auto r = finishRun(spec, hooks, l, sup, clock, digester, result);
  detail::runnerLog().debug(
      "run {}: setup+run {} ms", spec.execution_id,
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
  return r;
}

}  // namespace sluice::runner
