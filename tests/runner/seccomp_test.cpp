// The seccomp filter: the documented deny list holds the host-facing syscalls the issue names,
// every name resolves on this architecture, the program compiles, and the table `sluice run`
// installs refuses what it should — also when an argument the kernel reads as an int is spelled
// with bits set above 32 (loaded in a forked child, no sandbox needed).
#include "seccomp.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

using namespace sluice::runner::detail;

namespace {

bool denied(std::string_view name) {
  const auto& l = deniedSyscalls();
  return std::any_of(l.begin(), l.end(), [&](const DeniedSyscall& d) { return d.name == name; });
}

TEST(Seccomp, DenyListCoversHostFacingSyscalls) {
  for (const char* s :
       {"unshare", "setns", "mount", "umount2", "pivot_root", "ptrace", "bpf", "perf_event_open",
        "keyctl", "add_key", "init_module", "finit_module", "kexec_load", "reboot",
        "io_uring_setup", "userfaultfd", "open_by_handle_at", "process_vm_readv"})
    EXPECT_TRUE(denied(s)) << s;
}

TEST(Seccomp, EveryEntryHasAReasonAndResolves) {
  for (const auto& d : deniedSyscalls()) {
    EXPECT_FALSE(d.why.empty()) << d.name;
    EXPECT_NE(seccomp_syscall_resolve_name(std::string(d.name).c_str()), __NR_SCMP_ERROR) << d.name;
  }
}

TEST(Seccomp, ProgramBuilds) {
  auto prog = buildSeccompProgram();
  ASSERT_TRUE(prog) << prog.error();
  EXPECT_GT(prog->size(), 20u);
  EXPECT_LT(prog->size(), 4096u);  // BPF_MAXINSNS
}

TEST(Seccomp, BuildTimeTableEqualsAFreshCompile) {
  // `sluice run` installs the table compiled at build time; it must be exactly what
  // buildSeccompProgram() produces from the rules above, instruction for instruction.
  auto fresh = buildSeccompProgram();
  ASSERT_TRUE(fresh) << fresh.error();
  const auto& table = precompiledSeccompProgram();
  ASSERT_EQ(table.size(), fresh->size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    const sock_filter& a = table[i];
    const sock_filter& b = (*fresh)[i];
    EXPECT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k)
        << "instruction " << i << " differs";
  }
}

TEST(Seccomp, DocsListEverySyscall) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/sandbox.md");
  std::string doc((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(doc.empty());
  for (const auto& d : deniedSyscalls())
    EXPECT_NE(doc.find("`" + std::string(d.name) + "`"), std::string::npos) << d.name;
}

// One raw syscall made under the filter: what it is, its number and arguments.
struct Probe {
  const char* what;
  long nr;
  long a0, a1, a2;
};

constexpr long kHigh = 1L << 32;  // set above the int the kernel reads: ignored by the kernel

// The raw calls, each spelled the way a filter comparing 64 bits would miss (plus the plain
// spelling): family/type of socket and socketpair, ioctl's request, clone's flags.
constexpr std::array kRefused = {
    Probe{"socket(AF_NETLINK)", SYS_socket, AF_NETLINK, SOCK_RAW, 0},
    Probe{"socket(AF_NETLINK | 1<<32)", SYS_socket, AF_NETLINK | kHigh, SOCK_RAW, 0},
    Probe{"socket(AF_NETLINK | 1<<32, DGRAM)", SYS_socket, AF_NETLINK | kHigh, SOCK_DGRAM, 0},
    Probe{"socket(AF_PACKET)", SYS_socket, AF_PACKET, SOCK_DGRAM, 0},
    Probe{"socket(AF_PACKET | 1<<32)", SYS_socket, AF_PACKET | kHigh, SOCK_DGRAM, 0},
    Probe{"socket(AF_VSOCK)", SYS_socket, AF_VSOCK, SOCK_STREAM, 0},
    Probe{"socket(AF_VSOCK | 1<<32)", SYS_socket, AF_VSOCK | kHigh, SOCK_STREAM, 0},
    Probe{"socket(AF_ALG)", SYS_socket, AF_ALG, SOCK_SEQPACKET, 0},
    Probe{"socket(AF_UNSPEC)", SYS_socket, AF_UNSPEC, SOCK_STREAM, 0},
    Probe{"socket(AF_INET6 | 1<<4)", SYS_socket, AF_INET6 | 16, SOCK_STREAM, 0},
    Probe{"socket(AF_INET, SOCK_RAW)", SYS_socket, AF_INET, SOCK_RAW, IPPROTO_ICMP},
    Probe{"socket(AF_INET, SOCK_RAW | 1<<32)", SYS_socket, AF_INET, SOCK_RAW | kHigh, IPPROTO_ICMP},
    Probe{"socket(AF_INET, SOCK_PACKET)", SYS_socket, AF_INET, SOCK_PACKET, 0},
    Probe{"socketpair(AF_NETLINK | 1<<32)", SYS_socketpair, AF_NETLINK | kHigh, SOCK_DGRAM, 0},
    Probe{"socketpair(AF_PACKET)", SYS_socketpair, AF_PACKET, SOCK_DGRAM, 0},
    Probe{"socketpair(AF_VSOCK)", SYS_socketpair, AF_VSOCK, SOCK_STREAM, 0},
    Probe{"ioctl(TIOCSTI | 1<<32)", SYS_ioctl, 0, static_cast<long>(TIOCSTI) | kHigh, 0},
    Probe{"ioctl(TIOCLINUX | 1<<32)", SYS_ioctl, 0, static_cast<long>(TIOCLINUX) | kHigh, 0},
    Probe{"clone(CLONE_NEWUSER | 1<<32)", SYS_clone, CLONE_NEWUSER | SIGCHLD | kHigh, 0, 0},
    Probe{"clone(CLONE_NEWNET | 1<<32)", SYS_clone, CLONE_NEWNET | SIGCHLD | kHigh, 0, 0},
};
constexpr std::array kAllowed = {
    Probe{"socket(AF_UNIX)", SYS_socket, AF_UNIX, SOCK_STREAM, 0},
    Probe{"socket(AF_UNIX | 1<<32)", SYS_socket, AF_UNIX | kHigh, SOCK_STREAM, 0},
    Probe{"socket(AF_INET)", SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0},
    Probe{"socket(AF_INET6)", SYS_socket, AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0},
};

// The errnos the filter may answer for a probe (its own answer, not the kernel's): EPERM for
// the clone, ioctl and raw-type rules, EAFNOSUPPORT for a family off the allow-list. A raw
// socket of a refused family matches both rules; either answer refuses it.
std::vector<int> expectedErrnos(const Probe& p) {
  if (p.nr == SYS_ioctl || p.nr == SYS_clone) return {EPERM};
  const int type = static_cast<int>(p.a1) & 0xf;
  const bool raw = p.nr == SYS_socket && (type == SOCK_RAW || type == SOCK_PACKET);
  const int family = static_cast<int>(p.a0);
  const bool family_ok = family == AF_UNIX || family == AF_INET || family == AF_INET6;
  if (raw && family_ok) return {EPERM};
  if (raw) return {EPERM, EAFNOSUPPORT};
  return {EAFNOSUPPORT};
}

// Runs every probe in a forked child, with the build-time table loaded when `filtered`; returns
// each call's errno (0: it succeeded). A clone that succeeds makes a child that exits at once.
std::vector<int> runProbes(const std::vector<Probe>& probes, bool filtered) {
  const std::vector<sock_filter>& table = precompiledSeccompProgram();  // built before the fork
  int p[2];
  if (::pipe(p) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    if (filtered && (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !loadSeccompProgram(table)))
      ::_exit(2);
    for (const Probe& probe : probes) {
      long rc = ::syscall(probe.nr, probe.a0, probe.a1, probe.a2, 0L, 0L);
      int err = rc < 0 ? errno : 0;
      if (rc == 0 && probe.nr == SYS_clone) ::_exit(0);  // the clone's child
      if (rc > 0 && probe.nr == SYS_clone) ::waitpid(static_cast<pid_t>(rc), nullptr, 0);
      if (rc >= 0 && probe.nr == SYS_socket) ::close(static_cast<int>(rc));
      if (::write(p[1], &err, sizeof err) != sizeof err) ::_exit(3);
    }
    ::_exit(0);
  }
  ::close(p[1]);
  std::vector<int> out(probes.size(), -1);
  for (int& e : out)
    if (::read(p[0], &e, sizeof e) != sizeof e) break;
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return out;
}

TEST(Seccomp, InstalledTableRefusesEveryRuleAlsoSpelledWithHighBits) {
  const std::vector<Probe> probes(kRefused.begin(), kRefused.end());
  const std::vector<int> got = runProbes(probes, true);
  ASSERT_EQ(got.size(), probes.size());
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const std::vector<int> want = expectedErrnos(probes[i]);
    EXPECT_NE(std::find(want.begin(), want.end(), got[i]), want.end())
        << probes[i].what << ": " << (got[i] == 0 ? "allowed" : std::strerror(got[i]));
  }
}

TEST(Seccomp, HighBitNetlinkIsWhatTheKernelSeesAsNetlink) {
  // The control: without the filter the kernel ignores the upper half and makes a netlink
  // socket, so the refusal above is the filter's doing, not the kernel's.
  const std::vector<int> got = runProbes({kRefused[1]}, false);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], 0) << std::strerror(got[0]);
}

TEST(Seccomp, InstalledTableAllowsUnixAndInetSockets) {
  const std::vector<Probe> probes(kAllowed.begin(), kAllowed.end());
  const std::vector<int> got = runProbes(probes, true);
  ASSERT_EQ(got.size(), probes.size());
  for (std::size_t i = 0; i < probes.size(); ++i)
    EXPECT_EQ(got[i], 0) << probes[i].what << ": " << std::strerror(got[i]);
}

}  // namespace
