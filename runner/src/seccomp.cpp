// The sandbox's seccomp filter (see seccomp.hpp and docs/sandbox.md "Seccomp").
#include "seccomp.hpp"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice::runner::detail {
namespace {

// Every argument the filter inspects is one the kernel reads as a 32-bit int (socket's family
// and type, ioctl's request, clone's flags), ignoring the upper half of the 64-bit register. A
// 64-bit comparison would let `socket(AF_NETLINK | 1L << 32, ...)` through, so each comparison
// masks the argument to at most its low 32 bits. (libseccomp 2.5's SCMP_A0_32 only truncates
// the datum; the comparison it builds still reads all 64 bits.) A mask whose upper half is zero
// compiles to a test of the low word alone.
scmp_arg_cmp low32(unsigned arg, uint32_t mask, uint32_t value) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, mask, value};
}

constexpr uint32_t kNamespaceCloneFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                                          CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                                          CLONE_NEWCGROUP;
constexpr uint32_t kSocketTypeMask = 0xf;  // SOCK_TYPE_MASK in the kernel

bool allowedFamily(uint32_t family) {
  for (int f : kAllowedSocketFamilies)
    if (static_cast<uint32_t>(f) == family) return true;
  return false;
}

// "family not on the allow-list" as rules libseccomp can express (each rule tests the argument
// once; a match refuses): one per bit above the low four, since every allowed family is below
// 16, and one per value 0..15 not allowed. No rule matches an allowed family.
std::vector<scmp_arg_cmp> socketFamilyDenyRules() {
  static_assert(AF_UNIX < 16 && AF_INET < 16 && AF_INET6 < 16);
  std::vector<scmp_arg_cmp> out;
  for (uint32_t bit = 1u << 4; bit != 0; bit <<= 1) out.push_back(low32(0, bit, bit));
  for (uint32_t family = 0; family < 16; ++family)
    if (!allowedFamily(family)) out.push_back(low32(0, 0xf, family));
  return out;
}

// Exports the filter as BPF through a memfd (libseccomp writes to an fd) into a vector.
std::expected<std::vector<sock_filter>, std::string> exportProgram(scmp_filter_ctx ctx) {
  int fd = ::memfd_create("sluice-seccomp", MFD_CLOEXEC);
  if (fd < 0) return std::unexpected(std::string("memfd_create: ") + std::strerror(errno));
  int rc = seccomp_export_bpf(ctx, fd);
  if (rc != 0) {
    ::close(fd);
    return std::unexpected(std::string("seccomp_export_bpf: ") + std::strerror(-rc));
  }
  off_t size = ::lseek(fd, 0, SEEK_END);
  std::vector<sock_filter> prog(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t got = ::pread(fd, prog.data(), prog.size() * sizeof(sock_filter), 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(prog.size() * sizeof(sock_filter)) || prog.empty())
    return std::unexpected("seccomp: short read of exported filter");
  return prog;
}

}  // namespace

const std::vector<DeniedSyscall>& deniedSyscalls() {
  static const std::vector<DeniedSyscall> kList = {
      {"unshare", "new namespaces would undo the sandbox's view of the system"},
      {"setns", "joining another namespace"},
      {"mount", "changing the file system layout"},
      {"umount2", "uncovering what the sandbox's mounts hide"},
      {"pivot_root", "changing the root"},
      {"chroot", "changing the root"},
      {"move_mount", "new mount API"},
      {"open_tree", "new mount API"},
      {"fsopen", "new mount API"},
      {"fsconfig", "new mount API"},
      {"fsmount", "new mount API"},
      {"fspick", "new mount API"},
      {"mount_setattr", "new mount API"},
      {"ptrace", "inspecting or controlling other processes"},
      {"process_vm_readv", "reading another process's memory"},
      {"process_vm_writev", "writing another process's memory"},
      {"kcmp", "probing other processes' kernel objects"},
      {"pidfd_getfd", "stealing another process's file descriptors"},
      {"bpf", "eBPF programs and maps: large kernel attack surface"},
      {"perf_event_open", "performance counters: side channels and kernel attack surface"},
      {"userfaultfd", "used to widen kernel race windows in exploits"},
      {"io_uring_setup", "io_uring bypasses seccomp for the operations it performs"},
      {"io_uring_enter", "io_uring"},
      {"io_uring_register", "io_uring"},
      {"add_key", "kernel keyrings are not namespaced"},
      {"request_key", "kernel keyrings are not namespaced"},
      {"keyctl", "kernel keyrings are not namespaced"},
      {"init_module", "loading kernel modules"},
      {"finit_module", "loading kernel modules"},
      {"delete_module", "unloading kernel modules"},
      {"kexec_load", "replacing the kernel"},
      {"kexec_file_load", "replacing the kernel"},
      {"reboot", "rebooting the host"},
      {"swapon", "host swap configuration"},
      {"swapoff", "host swap configuration"},
      {"acct", "host process accounting"},
      {"quotactl", "host disk quotas"},
      {"syslog", "reading the kernel log (addresses, host activity)"},
      {"settimeofday", "the clock is not namespaced"},
      {"clock_settime", "the clock is not namespaced"},
      {"clock_adjtime", "the clock is not namespaced"},
      {"adjtimex", "the clock is not namespaced"},
      {"sethostname", "hostname changes"},
      {"setdomainname", "domain name changes"},
      {"iopl", "raw I/O port access"},
      {"ioperm", "raw I/O port access"},
      {"open_by_handle_at", "opening files by handle bypasses the mount namespace"},
      {"name_to_handle_at", "file handles (pairs with open_by_handle_at)"},
      {"lookup_dcookie", "kernel profiling interface"},
      {"fanotify_init", "watching file system activity"},
      {"vhangup", "hanging up the terminal"},
      {"personality", "can disable ASLR and change syscall semantics"},
      {"uselib", "obsolete loader interface"},
      {"nfsservctl", "obsolete NFS server control"},
  };
  return kList;
}

std::expected<std::vector<sock_filter>, std::string> buildSeccompProgram() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return std::unexpected("seccomp_init failed");
  struct Guard {
    scmp_filter_ctx c;
    ~Guard() { seccomp_release(c); }
  } guard{ctx};
  // A syscall made through another architecture's entry point (int 0x80, x32) would bypass a
  // filter written for x86-64 numbers: kill instead.
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0)
    return std::unexpected("seccomp: cannot set bad-arch action");
  // The syscall numbers as a binary tree, not a list: installing the filter makes the kernel
  // run it once per syscall number to find the ones it always allows (the action cache), which
  // over a list cost ~100 us of every start; over the tree ~40 us. Same decisions.
  if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0)
    return std::unexpected("seccomp: cannot ask for the binary-tree layout");
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  auto rule = [&](uint32_t action, const char* name, unsigned n,
                  const scmp_arg_cmp* args) -> std::expected<void, std::string> {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return {};  // not on this architecture: nothing to deny
    int rc = n == 0 ? seccomp_rule_add(ctx, action, nr, 0)
                    : seccomp_rule_add_array(ctx, action, nr, n, args);
    if (rc != 0)
      return std::unexpected(std::string("seccomp rule for ") + name + ": " + std::strerror(-rc));
    return {};
  };
  for (const DeniedSyscall& d : deniedSyscalls())
    if (auto r = rule(eperm, std::string(d.name).c_str(), 0, nullptr); !r)
      return std::unexpected(r.error());

  // clone: threads and fork are fine; new namespaces are not. The kernel reads only the low
  // 32 bits of the flags (lower_32_bits in kernel/fork.c); every mask here is within them.
  {
    // libseccomp expresses "flags & mask != 0" as one rule per bit.
    for (uint32_t bit = 1; bit != 0; bit <<= 1) {
      if ((kNamespaceCloneFlags & bit) == 0) continue;
      const scmp_arg_cmp a = low32(0, bit, bit);
      if (auto r = rule(eperm, "clone", 1, &a); !r) return std::unexpected(r.error());
    }
  }
  // clone3 passes its flags in memory seccomp cannot read; ENOSYS makes glibc use clone.
  if (auto r = rule(SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, nullptr); !r)
    return std::unexpected(r.error());

  // Sockets: the only way out is TCP to the proxy. Families are an allow-list (kSocketFamilies);
  // anything else (netlink, packet, vsock, alg, bluetooth, ...) answers EAFNOSUPPORT, as from a
  // kernel built without that family. socketpair gets the same list.
  for (const char* call : {"socket", "socketpair"})
    for (const scmp_arg_cmp& a : socketFamilyDenyRules())
      if (auto r = rule(SCMP_ACT_ERRNO(EAFNOSUPPORT), call, 1, &a); !r)
        return std::unexpected(r.error());
  // Raw sockets of an allowed family (SOCK_RAW), and SOCK_PACKET, which the kernel turns into
  // an AF_PACKET socket for AF_INET (net/socket.c), answer EPERM as they would without
  // CAP_NET_RAW. The type carries SOCK_NONBLOCK/SOCK_CLOEXEC above its low four bits.
  for (uint32_t type : {uint32_t{SOCK_RAW}, uint32_t{SOCK_PACKET}}) {
    const scmp_arg_cmp a = low32(1, kSocketTypeMask, type);
    if (auto r = rule(eperm, "socket", 1, &a); !r) return std::unexpected(r.error());
  }
  // Terminal input injection into a shared tty (the request is an unsigned int).
  for (uint32_t req : {uint32_t{TIOCSTI}, uint32_t{TIOCLINUX}}) {
    const scmp_arg_cmp a = low32(1, 0xffffffffu, req);
    if (auto r = rule(eperm, "ioctl", 1, &a); !r) return std::unexpected(r.error());
  }

  return exportProgram(ctx);
}

StepResult loadSeccompProgram(const std::vector<sock_filter>& program) {
  sock_fprog fprog{static_cast<unsigned short>(program.size()),
                   const_cast<sock_filter*>(program.data())};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) != 0)
    return stepFail("load seccomp filter");
  return stepOk();
}

}  // namespace sluice::runner::detail
