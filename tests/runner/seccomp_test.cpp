// The seccomp filter: the documented deny list holds the host-facing syscalls the issue names,
// every name resolves on this architecture, and the program compiles.
#include "seccomp.hpp"

#include <gtest/gtest.h>
#include <seccomp.h>

#include <algorithm>
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

}  // namespace
