// What a program inside the sandbox can reach and see, probed from inside (root): socket
// families off the allow-list and every argument rule spelled with bits above 32, the host's
// kernel command line and the kernel files container runtimes mask, and the mount table, which
// must not name the host path of an --input.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "isolation.hpp"
#include "sluice/runner/sandbox.hpp"

namespace fs = std::filesystem;
using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

RunSpec bash(const std::string& script) {
  static std::atomic<int> n{0};
  RunSpec s;
  s.argv = {"/bin/bash", "-c", script};
  s.execution_id = "t-view-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  s.limits.timeout = 20s;
  s.limits.cpu_time = 10s;
  return s;
}

std::string mustRun(const RunSpec& spec) {
  auto r = runSandboxed(spec);
  EXPECT_TRUE(r) << (r ? "" : r.error().where + ": " + r.error().message);
  if (!r) return {};
  EXPECT_EQ(r->exit_code, 0) << r->out.text << r->err.text;
  return r->out.text;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Raw syscalls from python's ctypes, each printed as "name ok" or "name ERRNONAME". Bit 32 is
// ignored by the kernel (it reads an int) and was ignored by a filter comparing 64 bits.
constexpr const char* kSyscallProbe = R"(python3 - <<'PY'
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
H = 1 << 32
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40
STREAM, DGRAM = 1, 2
def call(name, nr, *args):
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    err = ctypes.get_errno()
    if rc == 0 and nr == 56:
        os._exit(0)  # the child of an allowed clone
    if rc > 0 and nr == 56:
        os.waitpid(rc, 0)
    if rc >= 0 and nr == 41:
        os.close(rc)
    print(name, "ok" if rc >= 0 else errno.errorcode.get(err, err))
pair = (ctypes.c_int * 2)()
for fam, fname in ((AF_NETLINK, "netlink"), (AF_PACKET, "packet"), (AF_VSOCK, "vsock")):
    kind = DGRAM if fam != AF_VSOCK else STREAM
    call("socket_" + fname, 41, fam, kind, 0)
    call("socket_" + fname + "_hi", 41, fam | H, kind, 0)
    call("socketpair_" + fname + "_hi", 53, fam | H, kind, 0, ctypes.addressof(pair))
call("socket_unix", 41, AF_UNIX, STREAM, 0)
call("socket_inet", 41, AF_INET, STREAM, 0)
call("socket_inet6", 41, AF_INET6, DGRAM, 0)
call("socketpair_unix", 53, AF_UNIX, STREAM, 0, ctypes.addressof(pair))
call("ioctl_tiocsti_hi", 16, 0, 0x5412 | H, 0)
call("clone_newuser_hi", 56, 0x10000000 | 17 | H, 0, 0, 0, 0)
call("clone_newnet_hi", 56, 0x40000000 | 17 | H, 0, 0, 0, 0)
PY)";

TEST(SandboxView, SocketFamiliesAreAnAllowListAlsoSpelledWithHighBits) {
  REQUIRE_SANDBOX();
  const std::string out = mustRun(bash(kSyscallProbe));
  // The filter's answers: EAFNOSUPPORT for a family off the list (the kernel itself would make
  // the netlink and vsock sockets, and refuse packet with EPERM), EPERM for the others (the
  // kernel would say ENOTTY for TIOCSTI on /dev/null).
  for (const char* f : {"netlink", "packet", "vsock"}) {
    for (const std::string& name : {std::string("socket_") + f, std::string("socket_") + f + "_hi",
                                    std::string("socketpair_") + f + "_hi"})
      EXPECT_NE(out.find(name + " EAFNOSUPPORT\n"), std::string::npos) << name << "\n" << out;
  }
  for (const char* name : {"ioctl_tiocsti_hi", "clone_newuser_hi", "clone_newnet_hi"})
    EXPECT_NE(out.find(std::string(name) + " EPERM\n"), std::string::npos) << name << "\n" << out;
  for (const char* name : {"socket_unix", "socket_inet", "socket_inet6", "socketpair_unix"})
    EXPECT_NE(out.find(std::string(name) + " ok\n"), std::string::npos) << name << "\n" << out;
}

TEST(SandboxView, KernelCommandLineAndMaskedKernelFilesReadEmpty) {
  REQUIRE_SANDBOX();
  std::string host_cmdline = slurp("/proc/cmdline");
  while (!host_cmdline.empty() && host_cmdline.back() == '\n') host_cmdline.pop_back();
  ASSERT_FALSE(host_cmdline.empty());
  const std::string out =
      mustRun(bash("cat /proc/cmdline; echo cmdline $(cat /proc/cmdline | wc -c); "
                   "for f in kcore keys timer_list timer_stats sched_debug latency_stats; do "
                   "  [ -e /proc/$f ] && echo $f $(cat /proc/$f 2>&1 | wc -c); done; "
                   "for d in acpi scsi asound; do "
                   "  [ -e /proc/$d ] && echo $d $(ls -A /proc/$d 2>&1 | wc -l); done; true"));
  EXPECT_EQ(out.find(host_cmdline), std::string::npos) << out;
  EXPECT_NE(out.find("cmdline 0\n"), std::string::npos) << out;
  for (const char* e : {"kcore", "keys", "timer_list", "timer_stats", "sched_debug",
                        "latency_stats", "acpi", "scsi", "asound"}) {
    if (!fs::exists(std::string("/proc/") + e)) continue;  // this kernel has none
    EXPECT_NE(out.find(std::string(e) + " 0\n"), std::string::npos) << e << "\n" << out;
  }
}

// Renames and hard links between directories of one writable tree work (Landlock grants
// REFER beneath /work, /tmp, /output), as tools that write a temporary file and rename it
// into place expect; across two mounts the kernel's EXDEV stays, and nothing is moved into a
// read-only tree. Fails without REFER: os.rename gives EXDEV inside /work.
constexpr const char* kRenameProbe = R"(python3 - <<'PY'
import errno, os
def probe(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
for d in ("/work/a", "/work/b/c", "/tmp/x", "/tmp/y"):
    os.makedirs(d, exist_ok=True)
open("/work/a/f", "w").write("moved")
open("/tmp/x/g", "w").write("linked")
probe("rename-within-work", lambda: os.rename("/work/a/f", "/work/b/c/f"))
print("content", open("/work/b/c/f").read())
probe("rename-dir-within-work", lambda: os.rename("/work/b/c", "/work/a/c"))
probe("link-within-tmp", lambda: os.link("/tmp/x/g", "/tmp/y/g"))
probe("rename-work-to-tmp", lambda: os.rename("/work/a/c/f", "/tmp/f"))
probe("rename-out-to-etc", lambda: os.rename("/work/a/c/f", "/etc/f"))
probe("link-out-to-usr", lambda: os.link("/tmp/x/g", "/usr/g"))
PY)";

TEST(SandboxView, RenamesAndLinksAcrossDirectoriesOfOneWritableTree) {
  REQUIRE_SANDBOX();
  const std::string out = mustRun(bash(kRenameProbe));
  EXPECT_NE(out.find("rename-within-work ok\n"), std::string::npos) << out;
  EXPECT_NE(out.find("content moved\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rename-dir-within-work ok\n"), std::string::npos) << out;
  EXPECT_NE(out.find("link-within-tmp ok\n"), std::string::npos) << out;
  // /work and /tmp are separate mounts: EXDEV, as on any host (mv falls back to a copy).
  EXPECT_NE(out.find("rename-work-to-tmp EXDEV\n"), std::string::npos) << out;
  // Out of the writable trees: refused (read-only mount or Landlock), never "ok".
  EXPECT_EQ(out.find("rename-out-to-etc ok"), std::string::npos) << out;
  EXPECT_EQ(out.find("link-out-to-usr ok"), std::string::npos) << out;
}

// The default /etc carries what ordinary programs read (alternatives, name databases, the
// loader's paths) and nothing with secrets; /var/tmp and /var/cache are empty and writable.
TEST(SandboxView, EverydayEtcAndVarWithoutSecrets) {
  REQUIRE_SANDBOX();
  if (!fs::exists("/etc/alternatives/awk")) GTEST_SKIP() << "host has no awk alternative";
  const std::string out = mustRun(
      bash("echo 'a b' | awk '{print $2}'; "
           "command -v which >/dev/null && echo which-ok; "
           "getent services https | awk '{print $1}'; "
           "for f in /etc/shadow /etc/gshadow /etc/ssh /etc/ssl/private /etc/sudoers /etc/npmrc "
           "/etc/pip.conf /etc/gitconfig /etc/environment /etc/machine-id; do "
           "  [ -e $f ] && echo present:$f; done; "
           "ls -A /var/tmp /var/cache | tr -d '\\n'; echo; "
           "echo t > /var/tmp/t && echo c > /var/cache/c && cat /var/tmp/t /var/cache/c; "
           "stat -c %u /var/cache/c; touch /var/x 2>/dev/null || echo var-readonly; "
           "touch /etc/alternatives/x 2>/dev/null || echo alternatives-readonly"));
  EXPECT_NE(out.find("b\nwhich-ok\nhttps\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("present:"), std::string::npos) << out;
  EXPECT_NE(out.find("/var/cache:/var/tmp:\nt\nc\n65534\n"), std::string::npos) << out;
  EXPECT_NE(out.find("var-readonly\nalternatives-readonly\n"), std::string::npos) << out;
}

// A policy's host mount is there, read-only, and nothing else of its parent.
TEST(SandboxView, HostMountsAreReadOnly) {
  REQUIRE_SANDBOX();
  const fs::path base = fs::canonical(fs::temp_directory_path()) /
                        ("sluice-view-mount-" + std::to_string(::getpid()));
  fs::create_directories(base / "conf" / "sub");
  std::ofstream(base / "conf" / "sub" / "a.conf") << "setting 1\n";
  std::ofstream(base / "sibling") << "not shown\n";
  RunSpec s = bash(
      "cat /etc/extra/sub/a.conf; "
      "(echo x > /etc/extra/new) 2>/dev/null && echo WROTE; "
      "(echo x >> /etc/extra/sub/a.conf) 2>/dev/null && echo WROTE; "
      "ls /etc/extra; grep ' /etc/extra ' /proc/self/mountinfo | grep -c 'ro,nosuid,nodev'");
  s.mounts = {{(base / "conf").string(), "/etc/extra"}};
  const std::string out = mustRun(s);
  fs::remove_all(base);
  EXPECT_EQ(out, "setting 1\nsub\n1\n");
}

TEST(SandboxView, MountTableNamesNoHostInputPath) {
  REQUIRE_SANDBOX();
  const fs::path base = fs::canonical(fs::temp_directory_path()) /
                        ("sluice-view-" + std::to_string(::getpid())) / "host-only-dir-name";
  fs::create_directories(base / "data");
  std::ofstream(base / "data" / "a.csv") << "a,b\n";
  std::ofstream(base / "notes.txt") << "notes\n";
  RunSpec s = bash(
      "cat /input/data/a.csv /input/notes.txt; "
      "(echo x > /input/data/new) 2>/dev/null && echo WROTE; "
      "(echo x >> /input/notes.txt) 2>/dev/null && echo WROTE; "
      "cat /proc/self/mountinfo /proc/self/mounts /proc/self/mountstats /proc/1/mountinfo");
  s.inputs.push_back({base / "data", "data"});
  s.inputs.push_back({base / "notes.txt", "notes.txt"});
  const std::string out = mustRun(s);
  fs::remove_all(base.parent_path());
  EXPECT_EQ(out.rfind("a,b\nnotes\n", 0), 0u) << out;
  EXPECT_EQ(out.find("WROTE"), std::string::npos) << out;
  EXPECT_NE(out.find(" /input/data "), std::string::npos) << out;  // the table was read
  EXPECT_EQ(out.find("host-only-dir-name"), std::string::npos) << out;
  EXPECT_EQ(out.find(base.parent_path().filename().string()), std::string::npos) << out;
}

TEST(SandboxView, AnInputWithAMountBeneathStillShowsIt) {
  // An overlay would show what lies under the mount; such an input is bound as before.
  REQUIRE_SANDBOX();
  const fs::path base =
      fs::canonical(fs::temp_directory_path()) / ("sluice-view-sub-" + std::to_string(::getpid()));
  fs::create_directories(base / "sub");
  std::ofstream(base / "sub" / "hidden") << "under the mount\n";
  ASSERT_EQ(::mount("tmpfs", (base / "sub").c_str(), "tmpfs", 0, "size=64k"), 0);
  std::ofstream(base / "sub" / "f") << "on the mount\n";
  RunSpec s = bash("cat /input/in/sub/f; ls /input/in/sub");
  s.inputs.push_back({base, "in"});
  const std::string out = mustRun(s);
  ::umount2((base / "sub").c_str(), MNT_DETACH);
  fs::remove_all(base);
  EXPECT_EQ(out, "on the mount\nf\n");
}

}  // namespace
