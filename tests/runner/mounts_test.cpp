// The sandbox's mount plan (parent side): what gets bound read-only, generated /etc, inputs
// (through overlays, so the mount table names no host path), masked /proc entries, the scratch
// tmpfs sized by `disk`, and the refusals (bad input paths, files outside /etc).
#include "mounts.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace sluice::runner;
using namespace sluice::runner::detail;

namespace {

const MountOp* find(const MountPlan& p, MountOp::Kind k, const std::string& suffix) {
  for (const MountOp& op : p.ops)
    if (op.kind == k && op.path.ends_with(suffix)) return &op;
  return nullptr;
}

RunSpec spec() {
  RunSpec s;
  s.argv = {"true"};
  s.execution_id = "t";
  return s;
}

TEST(MountPlan, SystemDirsReadOnlyEtcGeneratedScratchSized) {
  RunSpec s = spec();
  s.limits.disk = 7ull << 20;
  auto p = buildMountPlan(s, false);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->stage, kStageDir);
  // /usr is a read-only bind; merged-/usr links are symlinks, not binds.
  const MountOp* usr = find(*p, MountOp::Kind::kBindRo, "/root/usr");
  ASSERT_NE(usr, nullptr);
  EXPECT_EQ(usr->source, "/usr");
  if (fs::is_symlink("/bin")) {
    EXPECT_NE(find(*p, MountOp::Kind::kSymlink, "/root/bin"), nullptr);
  }
  const MountOp* resolv = find(*p, MountOp::Kind::kWriteFile, "/etc/resolv.conf");
  ASSERT_NE(resolv, nullptr);
  EXPECT_EQ(resolv->content.rfind("nameserver 127.0.0.1", 0), 0u);
  const MountOp* passwd = find(*p, MountOp::Kind::kWriteFile, "/etc/passwd");
  ASSERT_NE(passwd, nullptr);
  EXPECT_NE(passwd->content.find("sandbox:x:65534:65534"), std::string::npos);
  const MountOp* scratch = find(*p, MountOp::Kind::kTmpfs, "/scratch");
  ASSERT_NE(scratch, nullptr);
  EXPECT_NE(scratch->source.find("size=" + std::to_string(7ull << 20)), std::string::npos);
  for (const char* d : {"/root/work", "/root/tmp", "/root/output", "/root/dev/shm"})
    EXPECT_NE(find(*p, MountOp::Kind::kBindRw, d), nullptr) << d;
  // Nothing else of the host: no bind of /home, /root, /var, /run, /etc as a whole.
  for (const MountOp& op : p->ops) {
    if (op.kind != MountOp::Kind::kBindRo && op.kind != MountOp::Kind::kBindRw) continue;
    for (const char* bad : {"/home", "/root", "/var", "/run", "/etc"}) {
      EXPECT_NE(op.source, bad) << "binds host " << op.source;
    }
  }
}

TEST(MountPlan, DeviceNodesAreMadeOrBoundInAUserNamespace) {
  auto root = buildMountPlan(spec(), false);
  ASSERT_TRUE(root);
  EXPECT_NE(find(*root, MountOp::Kind::kMknod, "/dev/null"), nullptr);
  auto userns = buildMountPlan(spec(), true);
  ASSERT_TRUE(userns);
  EXPECT_EQ(find(*userns, MountOp::Kind::kMknod, "/dev/null"), nullptr);
  EXPECT_NE(find(*userns, MountOp::Kind::kBindRw, "/dev/null"), nullptr);
}

TEST(MountPlan, InputFilesAreBoundOutOfAnOverlayOfTheirDirectory) {
  const fs::path dir = fs::canonical(fs::temp_directory_path());
  const fs::path f = dir / ("sluice-mp-" + std::to_string(::getpid()));
  std::ofstream(f) << "x";
  RunSpec s = spec();
  s.inputs.push_back({f, "data/file.csv"});
  auto p = buildMountPlan(s, false);
  fs::remove(f);
  ASSERT_TRUE(p) << p.error().message;
  // The overlay of the file's directory is mounted in the staging tmpfs, never in the sandbox.
  const MountOp* overlay = find(*p, MountOp::Kind::kOverlayRo, "/in0");
  ASSERT_NE(overlay, nullptr);
  EXPECT_EQ(overlay->path, p->stage + "/in0");
  EXPECT_EQ(overlay->source, dir.string());
  const MountOp* in = find(*p, MountOp::Kind::kBindRo, "/root/input/data/file.csv");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->source, p->stage + "/in0/" + f.filename().string());
  EXPECT_NE(find(*p, MountOp::Kind::kTouch, "/root/input/data/file.csv"), nullptr);
}

TEST(MountPlan, InputDirectoriesAreOverlaysWhoseOptionsNameNoHostPath) {
  const fs::path d = fs::canonical(fs::temp_directory_path()) /
                     ("sluice-mp-host-only-name-" + std::to_string(::getpid()));
  fs::create_directories(d);
  RunSpec s = spec();
  s.inputs.push_back({d, "data"});
  auto p = buildMountPlan(s, false);
  fs::remove(d);
  ASSERT_TRUE(p) << p.error().message;
  const MountOp* in = find(*p, MountOp::Kind::kOverlayRo, "/root/input/data");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->source, d.string());  // the child works from inside it: the layer is "."
  EXPECT_EQ(in->content.find("host-only-name"), std::string::npos) << in->content;
  EXPECT_EQ(in->content.rfind("lowerdir=.:", 0), 0u) << in->content;
  EXPECT_EQ(find(*p, MountOp::Kind::kBindRo, "/root/input/data"), nullptr);
}

TEST(MountPlan, AnInputWithAMountBeneathIsBound) {
  // "/" has /proc beneath it, which an overlay would not show: bound as is.
  RunSpec s = spec();
  s.inputs.push_back({"/", "host"});
  auto p = buildMountPlan(s, false);
  ASSERT_TRUE(p) << p.error().message;
  const MountOp* in = find(*p, MountOp::Kind::kBindRo, "/root/input/host");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->source, "/");
  EXPECT_EQ(find(*p, MountOp::Kind::kOverlayRo, "/root/input/host"), nullptr);
}

TEST(MountPlan, KernelCommandLineAndRuncsMaskedProcEntriesAreMasked) {
  auto p = buildMountPlan(spec(), false);
  ASSERT_TRUE(p);
  const MountOp* cmdline = find(*p, MountOp::Kind::kMask, "/root/proc/cmdline");
  ASSERT_NE(cmdline, nullptr);
  EXPECT_EQ(cmdline->source, p->new_root + "/dev/null");
  for (const char* e : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                        "/proc/latency_stats", "/proc/acpi", "/proc/scsi"}) {
    struct stat st {};
    if (::lstat(e, &st) != 0) continue;  // this kernel has none: nothing to mask
    const MountOp* m = find(*p, MountOp::Kind::kMask, std::string("/root") + e);
    ASSERT_NE(m, nullptr) << e;
    EXPECT_EQ(m->source.empty(), S_ISDIR(st.st_mode)) << e;  // directories: an empty tmpfs
  }
  // After /proc is mounted and /dev/null made, or there is nothing to mask and nothing to bind.
  auto at = [&](MountOp::Kind k, const std::string& suffix) {
    return std::find_if(p->ops.begin(), p->ops.end(), [&](const MountOp& op) {
      return op.kind == k && op.path.ends_with(suffix);
    });
  };
  EXPECT_LT(at(MountOp::Kind::kProc, "/root/proc"), at(MountOp::Kind::kMask, "/proc/cmdline"));
  EXPECT_LT(at(MountOp::Kind::kMknod, "/root/dev/null"), at(MountOp::Kind::kMask, "/proc/cmdline"));
}

TEST(MountPlan, RefusesEscapingInputsAndMissingSources) {
  RunSpec s = spec();
  for (const char* bad : {"../etc", "/abs", "a/../../b", ""}) {
    s.inputs = {{"/usr", bad}};
    auto p = buildMountPlan(s, false);
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.error().where, "input");
  }
  s.inputs = {{"/no/such/path", "x"}};
  EXPECT_FALSE(buildMountPlan(s, false));
  s.inputs = {{"/usr", "x"}, {"/bin", "x"}};
  EXPECT_FALSE(buildMountPlan(s, false));  // the same sandbox path twice
}

TEST(MountPlan, ExtraFilesOnlyUnderEtc) {
  RunSpec s = spec();
  s.extra_files = {{"/etc/ssl/certs/ca-certificates.crt", "PEM"}};
  auto p = buildMountPlan(s, false);
  ASSERT_TRUE(p);
  const MountOp* ca = find(*p, MountOp::Kind::kWriteFile, "/etc/ssl/certs/ca-certificates.crt");
  ASSERT_NE(ca, nullptr);
  EXPECT_EQ(ca->content, "PEM");
  // The caller's bundle replaces the host's: no bind of the host file then.
  EXPECT_EQ(find(*p, MountOp::Kind::kBindRo, "/etc/ssl/certs/ca-certificates.crt"), nullptr);
  s.extra_files = {{"/work/x", "y"}};
  EXPECT_FALSE(buildMountPlan(s, false));
  s.extra_files = {{"/etc/../usr/x", "y"}};
  EXPECT_FALSE(buildMountPlan(s, false));
}

TEST(MountPlan, UserNamespaceStagingAvoidsInputs) {
  RunSpec s = spec();
  auto p = buildMountPlan(s, true);
  ASSERT_TRUE(p);
  EXPECT_NE(p->stage, kStageDir);
  if (fs::is_directory("/mnt") && !fs::is_directory("/run/user/" + std::to_string(::getuid()))) {
    EXPECT_EQ(p->stage, "/mnt");
    s.inputs = {{"/mnt", "m"}};
    auto q = buildMountPlan(s, true);
    ASSERT_TRUE(q);
    EXPECT_NE(q->stage, "/mnt");  // would hide the input
  }
}

// A policy's host mounts: read-only binds after the default /etc (so /etc/apt adds to it), a
// directory or a file; a missing source, or one reached through a symlink, is a setup error
// naming it.
TEST(MountPlan, HostMountsAreReadOnlyBindsAfterTheDefaultEtc) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-hostmount-" + std::to_string(::getpid()));
  fs::create_directories(dir / "conf");
  std::ofstream(dir / "file.txt") << "x\n";
  RunSpec s = spec();
  s.mounts = {{(dir / "conf").string(), "/etc/apt"}, {(dir / "file.txt").string(), "/opt/f.txt"}};
  auto p = buildMountPlan(s, false);
  ASSERT_TRUE(p) << p.error().message;
  const MountOp* apt = find(*p, MountOp::Kind::kBindRo, "/root/etc/apt");
  ASSERT_NE(apt, nullptr);
  EXPECT_EQ(apt->source, (dir / "conf").string());
  const MountOp* file = find(*p, MountOp::Kind::kBindRo, "/root/opt/f.txt");
  ASSERT_NE(file, nullptr);
  EXPECT_NE(find(*p, MountOp::Kind::kTouch, "/root/opt/f.txt"), nullptr);
  // After every op of the default /etc.
  auto index = [&](const MountOp* op) { return op - p->ops.data(); };
  const MountOp* passwd = find(*p, MountOp::Kind::kWriteFile, "/root/etc/passwd");
  ASSERT_NE(passwd, nullptr);
  EXPECT_GT(index(apt), index(passwd));
  const MountOp* mtab = find(*p, MountOp::Kind::kSymlink, "/root/etc/mtab");
  ASSERT_NE(mtab, nullptr);
  EXPECT_GT(index(apt), index(mtab));

  s.mounts = {{(dir / "missing").string(), "/etc/apt"}};
  auto missing = buildMountPlan(s, false);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().where, "mount");
  EXPECT_EQ(missing.error().message,
            "sandbox.mounts source " + (dir / "missing").string() + ": No such file or directory");

  fs::create_directory_symlink(dir / "conf", dir / "link");
  s.mounts = {{(dir / "link").string(), "/etc/apt"}};
  auto link = buildMountPlan(s, false);
  ASSERT_FALSE(link);
  EXPECT_NE(link.error().message.find("resolves to " + (dir / "conf").string()), std::string::npos)
      << link.error().message;
  fs::remove_all(dir);
}

}  // namespace
