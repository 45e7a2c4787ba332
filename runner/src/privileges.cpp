// Privilege drop for the sandboxed program (see privileges.hpp).
#include "privileges.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace sluice::runner::detail {
namespace {

constexpr unsigned long long kLandlockWrite =
    LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
    LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
    LANDLOCK_ACCESS_FS_MAKE_SYM;

// Landlock always denies reparenting (a rename or link into another directory: EXDEV) unless
// the ruleset handles REFER (ABI 2+) and a rule grants it beneath both ends. The writable trees
// grant it, so `os.rename('/work/a/f', '/work/b/f')` and a temp-file-then-rename work as on
// any host; between two mounts EXDEV stays (the kernel's, not Landlock's), and into a
// read-only tree the mount refuses it.
unsigned long long writableAccess(int abi) {
  return abi >= 2 ? kLandlockWrite | LANDLOCK_ACCESS_FS_REFER : kLandlockWrite;
}

}  // namespace

int landlockAbi() {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

StepResult applyRlimits(const PrivilegePlan& plan) {
  for (std::size_t i = 0; i < plan.rlimit_count; ++i)
    if (::setrlimit(static_cast<__rlimit_resource>(plan.rlimits[i].resource),
                    &plan.rlimits[i].value) != 0)
      return stepFail("setrlimit");
  return stepOk();
}

StepResult dropCapabilityBounds(const PrivilegePlan& plan) {
  // The bounding set limits what any later execve (of a setuid binary, say) could regain.
  for (int cap = 0; cap <= plan.cap_last; ++cap)
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      return stepFail("drop capability bounding set");
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return stepFail("clear ambient capabilities");
  return stepOk();
}

StepResult dropPrivileges(const PrivilegePlan& plan, bool bounds_dropped) {
  if (!bounds_dropped)
    if (auto r = dropCapabilityBounds(plan); !r) return r;
  // In a user namespace setgroups(2) is disabled (it could drop a group that denies access);
  // the unmapped supplementary groups are the caller's own.
  if (!plan.user_namespace && ::syscall(SYS_setgroups, 0, nullptr) != 0)
    return stepFail("setgroups");
  if (::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0) return stepFail("setresgid");
  if (::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) return stepFail("setresuid");
  // Changing uid from 0 clears permitted/effective, but inheritable survives: empty them all.
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &hdr, data) != 0) return stepFail("capset");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return stepFail("no_new_privs");
  return stepOk();
}

LandlockRuleset buildLandlockRuleset(const PrivilegePlan& plan) {
  if (plan.landlock_abi < 1) return {};
  landlock_ruleset_attr attr{};
  const unsigned long long writable = writableAccess(plan.landlock_abi);
  attr.handled_access_fs = writable;
  int ruleset = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (ruleset < 0) return {-1, stepFail("landlock create ruleset")};
  struct Allowed {
    const char* path;
    unsigned long long access;
  };
  const Allowed allowed[] = {
      {"/work", writable},
      {"/tmp", writable},
      {"/output", writable},
      {"/dev/shm", writable},
      {"/var/tmp", writable},
      {"/var/cache", writable},
      {"/dev/null", LANDLOCK_ACCESS_FS_WRITE_FILE},
      {"/dev/zero", LANDLOCK_ACCESS_FS_WRITE_FILE},
      {"/dev/full", LANDLOCK_ACCESS_FS_WRITE_FILE},
      {"/dev/tty", LANDLOCK_ACCESS_FS_WRITE_FILE},
      {"/dev/random", LANDLOCK_ACCESS_FS_WRITE_FILE},
      {"/dev/urandom", LANDLOCK_ACCESS_FS_WRITE_FILE},
      {"/dev/pts", LANDLOCK_ACCESS_FS_WRITE_FILE},
  };
  for (const Allowed& a : allowed) {
    int fd = ::open(a.path, O_PATH | O_CLOEXEC);
    if (fd < 0) continue;  // e.g. /dev/tty absent: nothing to allow
    landlock_path_beneath_attr rule{};
    rule.allowed_access = a.access;
    rule.parent_fd = fd;
    long rc = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    int e = errno;
    ::close(fd);
    if (rc != 0) {
      ::close(ruleset);
      return {-1, stepFail("landlock add rule", e)};
    }
  }
  return {ruleset, stepOk()};
}

StepResult restrictToLandlockRuleset(int ruleset) {
  if (ruleset < 0) return stepOk();
  if (::syscall(SYS_landlock_restrict_self, ruleset, 0) != 0)
    return stepFail("landlock restrict self");
  return stepOk();
}

StepResult applyLandlock(const PrivilegePlan& plan) {
  const LandlockRuleset rs = buildLandlockRuleset(plan);
  if (!rs.result) return rs.result;
  const StepResult r = restrictToLandlockRuleset(rs.fd);
  if (rs.fd >= 0) ::close(rs.fd);
  return r;
}

}  // namespace sluice::runner::detail
