// Privilege drop for the sandboxed program (child side, no allocation): rlimits, supplementary
// groups, uid/gid, every capability set, no_new_privs, and Landlock write confinement.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <array>
#include <cstddef>

#include "step.hpp"

namespace sluice::runner::detail {

struct RlimitSetting {
  int resource = 0;
  rlimit value{};
};

struct PrivilegePlan {
  std::array<RlimitSetting, 8> rlimits{};
  std::size_t rlimit_count = 0;
  uid_t uid = 65534;
  gid_t gid = 65534;
  int cap_last = 40;            // /proc/sys/kernel/cap_last_cap, read by the parent
  int landlock_abi = 0;         // 0: the kernel has no Landlock
  bool user_namespace = false;  // setgroups is denied there (setgroups "deny" in /proc)
};

/// Landlock ABI version of the running kernel (0 when unavailable). Parent side.
int landlockAbi();

StepResult applyRlimits(const PrivilegePlan& plan);
/// Empties the capability bounding set and the ambient set: what no later execve can gain. A
/// session's init does it once for itself, and so for every program it starts (the sets are
/// inherited; its own permitted and effective capabilities stay).
StepResult dropCapabilityBounds(const PrivilegePlan& plan);
/// Capability bounds (unless `bounds_dropped`: done and inherited), then groups, gid, uid (raw
/// syscalls: glibc's wrappers would signal threads that only exist in the parent), then empties
/// every capability set and sets no_new_privs.
StepResult dropPrivileges(const PrivilegePlan& plan, bool bounds_dropped = false);
/// Restricts writes to /work, /tmp, /output, /dev/shm and the /dev nodes. Needs no_new_privs.
/// The same as restrictToLandlockRuleset(buildLandlockRuleset(plan).fd).
StepResult applyLandlock(const PrivilegePlan& plan);

/// The Landlock ruleset applyLandlock() applies, as an fd (-1 when the kernel has no Landlock).
/// A session's init builds it once, in the sandbox's root, for every exec's program.
struct LandlockRuleset {
  int fd = -1;
  StepResult result;
};
LandlockRuleset buildLandlockRuleset(const PrivilegePlan& plan);
/// Confines the calling process by `ruleset` (nothing when -1). Needs no_new_privs.
StepResult restrictToLandlockRuleset(int ruleset);

}  // namespace sluice::runner::detail
