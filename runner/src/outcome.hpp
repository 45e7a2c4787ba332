// What a finished program's run amounts to: its exit, usage and which limit (if any) stopped
// it, from init's report, the kernel's counters and how supervision ended; plus the sandbox's
// scratch space as it was left. Used for `sluice run` and session execs.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "launch.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/sandbox.hpp"
#include "supervise.hpp"

namespace sluice::runner::detail {

/// The counters one program is answerable for: `now` minus what the cgroup had counted
/// `before` it started (a session's cgroup outlives its execs). Peaks are kept as they are.
CgroupStats countersSince(const CgroupStats& now, const CgroupStats& before);

/// Init gone without a report while the cgroup counted an OOM kill: it was killed with the
/// program, where it cannot exempt itself from the OOM killer (no CAP_SYS_RESOURCE) or by
/// cgroup v2's memory.oom.group. That is the memory limit at work, not a failed setup; the
/// program's own status is lost with init, so it is reported as killed by SIGKILL. True when
/// `sup` was completed so.
bool acceptReportLostToOom(Supervised& sup, const CgroupStats& counters);

/// True when the scratch tmpfs of the sandbox whose init is `init` is full (< 64 KiB or no
/// inodes free), read through /proc/<init>/root while its mount namespace lives.
bool scratchFull(pid_t init);
/// The same through `work_fd`, the sandbox's /work held open (O_PATH will do): a session's,
/// opened once, so that an exec does not walk /proc/<init>/root/work again.
bool scratchFullAt(int work_fd);

/// Fills exit, usage, output, stop and limit_hit of `result` (which limit: sluice's own timer
/// first, then the kernel's counters and the killing signal). `sup` must have a report.
void fillOutcome(Supervised& sup, const CgroupStats& counters, const Limits& limits, bool disk_full,
                 RunResult& result);

/// The isolation block of the receipt.
Isolation isolationOf(const Launched& l, uid_t uid, gid_t gid);

/// The error a supervision that ended without a report stands for (a setup failure, a stop
/// during setup, or init's death).
base::Error failureOf(const Supervised& sup);

}  // namespace sluice::runner::detail
