// The sandbox's seccomp filter: built with libseccomp in the parent and exported as classic BPF,
// so the child only has to call prctl() (libseccomp allocates; the child must not).
#pragma once

#include <linux/filter.h>
#include <sys/socket.h>

#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "step.hpp"

namespace sluice::runner::detail {

/// One syscall the filter refuses with EPERM, and why (docs/sandbox.md lists the same).
struct DeniedSyscall {
  std::string_view name;
  std::string_view why;
};

/// Syscalls refused outright (any arguments).
const std::vector<DeniedSyscall>& deniedSyscalls();

/// The socket families socket() and socketpair() may create; any other answers EAFNOSUPPORT.
inline constexpr int kAllowedSocketFamilies[] = {AF_UNIX, AF_INET, AF_INET6};

/// The compiled filter for the native architecture: default allow; EPERM for deniedSyscalls(),
/// namespace-creating clone flags, SOCK_RAW/SOCK_PACKET sockets and TIOCSTI/TIOCLINUX ioctls;
/// EAFNOSUPPORT for socket families not in kAllowedSocketFamilies; clone3 answers ENOSYS so
/// libc falls back to clone (whose flags we can inspect); other architectures (x32, i386 via
/// int 0x80) kill the process. Arguments are compared on their low 32 bits, as the kernel
/// reads them.
std::expected<std::vector<sock_filter>, std::string> buildSeccompProgram();

/// buildSeccompProgram()'s output for the build's architecture, compiled at build time
/// (tools/seccomp_gen.cpp), so `sluice run` does not pay libseccomp's compile on every start.
const std::vector<sock_filter>& precompiledSeccompProgram();

/// Installs the program for the calling thread (child side; no allocation). Needs no_new_privs.
StepResult loadSeccompProgram(const std::vector<sock_filter>& program);

}  // namespace sluice::runner::detail
