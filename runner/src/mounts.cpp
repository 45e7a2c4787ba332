// The sandbox file system: plan (parent) and apply (child). See mounts.hpp and docs/sandbox.md.
#include "mounts.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sluice::runner::detail {
namespace {

namespace fs = std::filesystem;

class PlanBuilder {
 public:
  explicit PlanBuilder(std::string root) : root_(std::move(root)) {}

  void mkdir(const std::string& p, unsigned mode = 0755) {
    if (!made_.insert(p).second) return;
    ops_.push_back({MountOp::Kind::kMkdir, root_ + p, {}, {}, mode, 0, "mkdir in new root"});
  }
  // mkdir -p of every parent of `p` (which is absolute inside the sandbox).
  void parents(const std::string& p) {
    for (size_t i = p.find('/', 1); i != std::string::npos; i = p.find('/', i + 1))
      mkdir(p.substr(0, i));
  }
  MountOp& add(MountOp::Kind k, const std::string& p, std::string source, const char* step,
               std::string content = {}, unsigned mode = 0644, dev_t dev = 0) {
    ops_.push_back({k, root_ + p, std::move(source), std::move(content), mode, dev, step});
    return ops_.back();
  }
  std::vector<MountOp> take() { return std::move(ops_); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  std::vector<MountOp> ops_;
  std::set<std::string> made_;
};

// Validated relative path inside /input: no empty, "." or ".." components.
bool safeRelative(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// A file the plan writes: new (the usual case), it gets its exact mode from open (the umask is
// 0 while the plan is applied); one there already (written earlier in the plan) is truncated
// and given the mode.
StepResult writeAll(const char* path, const std::string& content, unsigned mode) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW;
  int fd = ::open(path, kFlags | O_EXCL, mode);
  if (fd < 0 && errno == EEXIST) {
    fd = ::open(path, kFlags, mode);
    if (fd >= 0 && ::fchmod(fd, mode) != 0) {
      const int e = errno;
      ::close(fd);
      return stepFail("write file in new root", e);
    }
  }
  if (fd < 0) return stepFail("write file in new root");
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return stepFail("write file in new root", e);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  return stepOk();
}

// An empty regular file at `path`, a bind's mount point: one mknod. If something is there
// already, what open(O_CREAT) does: a file is fine, a directory or a symlink is refused.
StepResult touch(const char* path) {
  if (::mknod(path, S_IFREG | 0644, 0) == 0) return stepOk();
  if (errno != EEXIST) return stepFail("create mount point");
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return stepFail("create mount point");
  ::close(fd);
  return stepOk();
}

// A bind inherits the source's flags; read-only etc. need a second, remount call (child side,
// like the next two).
StepResult bindAndRemount(const char* source, const char* path, unsigned long flags,
                          const char* step) {
  if (::mount(source, path, nullptr, MS_BIND | MS_REC, nullptr) != 0) return stepFail(step);
  if (::mount(nullptr, path, nullptr, MS_REMOUNT | MS_BIND | flags, nullptr) != 0)
    return stepFail(step);
  return stepOk();
}

// An input through a read-only overlay (see planInputs): from inside the input directory, so
// the layer is ".". Where the kernel refuses (no overlayfs, a file system beneath that it cannot
// stack on), the input is bound instead: the same files, only the sandbox's mount table then
// shows the host path.
StepResult mountInputOverlay(const MountOp& op) {
  const unsigned long flags = MS_RDONLY | MS_NOSUID | MS_NODEV | op.keep_flags;
  if (::chdir(op.source.c_str()) != 0) return stepFail(op.step);
  if (::mount("overlay", op.path.c_str(), "overlay", flags, op.content.c_str()) == 0)
    return stepOk();
  return bindAndRemount(op.source.c_str(), op.path.c_str(), flags, op.step);
}

// Hides a /proc entry (planProcMasks).
StepResult maskProcEntry(const MountOp& op) {
  const int rc =
      op.source.empty()
          ? ::mount("tmpfs", op.path.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=4k,nr_inodes=2,mode=0555")
          : ::mount(op.source.c_str(), op.path.c_str(), nullptr, MS_BIND, nullptr);
  return rc == 0 ? stepOk() : stepFail(op.step);
}

// Flags of the mount holding `path` that a bind's remount must keep (in a user namespace they
// are locked and dropping one is EPERM); an overlay of the path gets them too (noexec).
unsigned long sourceFlags(const std::string& path) {
  struct statvfs sv {};
  if (::statvfs(path.c_str(), &sv) != 0) return 0;
  unsigned long keep = 0;
  if (sv.f_flag & ST_NOEXEC) keep |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) keep |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) keep |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) keep |= MS_RELATIME;
  if (sv.f_flag & ST_RDONLY) keep |= MS_RDONLY;
  return keep;
}

// The mount points of the caller's mount namespace: /proc/self/mountinfo's fifth field, where
// the kernel writes space, tab, newline and backslash as "\ooo" (octal).
std::vector<std::string> mountPoints() {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string f, path;
    for (int i = 0; i < 5; ++i) fields >> f;
    for (size_t i = 0; i < f.size(); ++i) {
      const bool esc = f[i] == '\\' && i + 3 < f.size();
      path.push_back(esc ? static_cast<char>(std::strtol(f.substr(i + 1, 3).c_str(), nullptr, 8))
                         : f[i]);
      if (esc) i += 3;
    }
    out.push_back(std::move(path));
  }
  return out;
}

bool kernelAtLeast(long major, long minor) {
  utsname u{};
  if (::uname(&u) != 0) return false;
  char* end = nullptr;
  const long got_major = std::strtol(u.release, &end, 10);
  const long got_minor = *end == '.' ? std::strtol(end + 1, nullptr, 10) : 0;
  return got_major > major || (got_major == major && got_minor >= minor);
}

bool beneath(const std::string& p, const std::string& dir) {
  return dir == "/" ? p != "/" : p.starts_with(dir + "/");
}

// The host's kernel command line and the kernel files runc masks (its default masked paths
// under /proc): a file gets /dev/null bound over it (reads as empty), a directory an empty
// read-only tmpfs. Only the entries this kernel has cost a mount.
constexpr const char* kMaskedProcEntries[] = {
    "/proc/cmdline",    "/proc/kcore",       "/proc/keys",        "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/acpi",
    "/proc/asound",     "/proc/scsi"};

void planProcMasks(PlanBuilder& b) {
  for (const char* p : kMaskedProcEntries) {
    struct stat st {};
    if (::lstat(p, &st) != 0) continue;  // not in this kernel: nothing to hide
    b.add(MountOp::Kind::kMask, p, S_ISDIR(st.st_mode) ? std::string() : b.root() + "/dev/null",
          "mask /proc entry");
  }
}

// Inputs, read-only under /input. However a host directory is bound, mountinfo's "root" field
// shows its path within its file system; an overlay is a file system whose root is "/". So a
// directory is shown through a read-only overlay of it (layer ".", the child's working directory:
// the options name no host path) and an empty staging directory (no upper layer: two needed). A
// file is bound out of an overlay of its directory mounted in the staging tmpfs (root
// "/<name>"). A directory with a mount beneath, or a file that is a mount point, is bound as
// before: an overlay would show what lies under the mount.
base::Result<void> planInputs(const RunSpec& spec, const std::string& stage, bool user_namespace,
                              PlanBuilder& b, std::vector<MountOp>& stage_ops) {
  auto err = [](std::string msg) {
    return std::unexpected(base::Error{base::Code::kIo, std::move(msg), "input"});
  };
  using K = MountOp::Kind;
  b.mkdir("/input");
  if (spec.inputs.empty()) return {};
  const std::vector<std::string> mounts = mountPoints();
  const std::string empty = stage + "/empty";
  // The empty directory as a data-only layer ("::", Linux >= 6.5) leaves the input the only
  // layer in the tree: st_dev is uniform and inode numbers are the input's. A user namespace
  // may not have one (it needs trusted xattrs): there, and on older kernels, a second layer.
  const std::string overlay =
      (!user_namespace && kernelAtLeast(6, 5) ? "lowerdir=.::" : "lowerdir=.:") + empty;
  stage_ops.push_back({K::kMkdir, empty, {}, {}, 0755, 0, "mkdir in staging tmpfs"});
  std::set<std::string> seen;
  unsigned files = 0;
  for (const Input& in : spec.inputs) {
    if (!safeRelative(in.sandbox))
      return err("--input " + in.host.string() + ":" + in.sandbox +
                 ": the sandbox path must be relative to /input, without '..'");
    const std::string dst = "/input/" + in.sandbox;
    if (!seen.insert(dst).second) return err(dst + ": given twice");
    struct stat st {};
    std::error_code ec;
    const fs::path host = fs::canonical(in.host, ec);
    if (ec || ::stat(host.c_str(), &st) != 0)
      return err(in.host.string() + ": " + std::strerror(ec ? ec.value() : errno));
    const bool dir = S_ISDIR(st.st_mode);
    auto mounted = [&](auto pred) { return std::any_of(mounts.begin(), mounts.end(), pred); };
    b.parents(dst);
    if (dir) {
      b.mkdir(dst);
      if (!mounted([&](const std::string& m) { return beneath(m, host.string()); })) {
        b.add(K::kOverlayRo, dst, host.string(), "mount input overlay", overlay).keep_flags =
            sourceFlags(host.string());
        continue;
      }
    } else {
      b.add(K::kTouch, dst, {}, "create input mount point");
      if (!mounted([&](const std::string& m) { return m == host.string(); })) {
        const std::string at = stage + "/in" + std::to_string(files++);
        const unsigned long keep = sourceFlags(host.parent_path().string());
        stage_ops.push_back({K::kMkdir, at, {}, {}, 0755, 0, "mkdir in staging tmpfs"});
        stage_ops.push_back({K::kOverlayRo, at, host.parent_path().string(), overlay, 0, 0,
                             "mount input overlay", keep});
        b.add(K::kBindRo, dst, at + "/" + host.filename().string(), "bind input read-only")
            .keep_flags = keep;
        continue;
      }
    }
    b.add(K::kBindRo, dst, host.string(), "bind input read-only");
  }
  return {};
}

std::unexpected<base::Error> err(std::string step, std::string msg) {
  return std::unexpected(base::Error{base::Code::kIo, std::move(msg), std::move(step)});
}

// A policy's read-only host paths (RunSpec::mounts), after the default /etc so that they may
// add to it (/etc/apt). The loader checked both paths by name; here the source must exist and
// be its own real path, so no symlink leads the bind somewhere the loader did not see.
base::Result<void> planHostMounts(const RunSpec& spec, PlanBuilder& b) {
  using K = MountOp::Kind;
  for (const HostMount& m : spec.mounts) {
    const std::string what = "sandbox.mounts source " + m.source;
    if (!m.target.starts_with("/") || !safeRelative(m.target.substr(1)))
      return err("mount", "sandbox.mounts target " + m.target + ": not a normalised absolute path");
    struct stat st {};
    if (::lstat(m.source.c_str(), &st) != 0)
      return err("mount", what + ": " + std::strerror(errno));
    std::error_code ec;
    const fs::path real = fs::canonical(m.source, ec);
    if (ec) return err("mount", what + ": " + ec.message());
    if (real.string() != m.source)
      return err("mount", what + " resolves to " + real.string() + ": name the real path");
    b.parents(m.target);
    if (S_ISDIR(st.st_mode)) {
      b.mkdir(m.target);
    } else if (S_ISREG(st.st_mode)) {
      b.add(K::kTouch, m.target, {}, "create host mount point");
    } else {
      return err("mount", what + ": neither a regular file nor a directory");
    }
    b.add(K::kBindRo, m.target, m.source, "bind host path read-only");
  }
  return {};
}

// Where the sandbox's mounts are staged: a directory that hides nothing the plan binds from
// the host (an input under it would vanish behind the staging tmpfs).
base::Result<std::string> chooseStage(const RunSpec& spec, bool user_namespace) {
  auto hides = [&](const std::string& dir) {
    std::vector<fs::path> hosts;
    for (const Input& in : spec.inputs) hosts.push_back(in.host);
    for (const HostMount& m : spec.mounts) hosts.emplace_back(m.source);
    for (const fs::path& host : hosts) {
      std::error_code ec;  // where the path really is: its symlinks resolved
      const std::string h = fs::weakly_canonical(fs::absolute(host), ec).string();
      if (h == dir || h.starts_with(dir + "/")) return true;
    }
    return false;
  };
  std::vector<std::string> candidates = {kStageDir};
  if (user_namespace)
    candidates = {
        "/run/user/" + std::to_string(::getuid()), "/mnt", "/media", "/srv", "/opt", "/tmp"};
  for (const std::string& c : candidates) {
    std::error_code ec;
    if (fs::is_directory(c, ec) && !fs::is_symlink(c, ec) && !hides(c)) {
      return c;
    }
  }
  return err("staging directory", "no directory to stage the sandbox's mounts on (tried " +
                                      candidates.front() + " and others)");
}

void planSystemDirs(PlanBuilder& b) {
  using K = MountOp::Kind;
  // System directories: read-only binds; merged-/usr symlinks (/bin -> usr/bin) are recreated
  // as symlinks so the sandbox sees the same layout as the host.
  for (const char* d : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st {};
    if (::lstat(d, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      fs::path target = fs::read_symlink(d, ec);
      if (!ec) b.add(K::kSymlink, d, target.string(), "symlink system dir");
    } else if (S_ISDIR(st.st_mode)) {
      b.mkdir(d);
      b.add(K::kBindRo, d, d, "bind system dir read-only");
    }
  }
}

// Host files under /etc that ordinary programs read and that hold no secrets, carried
// read-only into every sandbox (docs/sandbox.md "What the sandbox's /etc holds" says why each
// is safe). Absent ones are skipped. Never: shadow/gshadow, ssh, ssl/private, sudoers, pam,
// machine-id, environment, and package clients' configuration (npmrc, pip.conf, gitconfig,
// wgetrc), which can hold tokens or name private registries: a policy's `sandbox.mounts` may
// add those deliberately.
constexpr const char* kHostEtc[] = {
    "/etc/alternatives",  // Debian's alternatives: awk, editor, cc, pager, which
    "/etc/protocols",
    "/etc/services",  // name databases nsswitch.conf names (getservbyname)
    "/etc/networks",
    "/etc/rpc",
    "/etc/ethertypes",
    "/etc/host.conf",
    "/etc/gai.conf",  // resolver ordering (getaddrinfo)
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",  // the loader's search paths (ldconfig -p, dlopen)
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/issue",  // which distribution this is
    "/etc/mime.types",
    "/etc/magic",
    "/etc/magic.mime",  // file types (mimetypes, file(1))
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/inputrc",
    "/etc/shells",
    "/etc/locale.alias",
    "/etc/timezone",
    "/etc/ssl/openssl.cnf",  // OpenSSL's configuration, not its keys
    "/etc/perl",
    "/etc/python3",
    "/etc/python3.11",  // interpreters' site configuration
    "/etc/dpkg",        // dpkg's configuration and origins (apt-get download)
};

// One host path of kHostEtc into the sandbox: a symlink is recreated (os-release points into
// /usr), a file or directory is bound read-only.
void planHostEtcEntry(PlanBuilder& b, const char* path) {
  using K = MountOp::Kind;
  struct stat st {};
  if (::lstat(path, &st) != 0) return;
  b.parents(path);
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(path, ec);
    if (!ec) b.add(K::kSymlink, path, target.string(), "symlink host /etc entry");
  } else if (S_ISDIR(st.st_mode)) {
    b.mkdir(path);
    b.add(K::kBindRo, path, path, "bind host /etc directory read-only");
  } else if (S_ISREG(st.st_mode)) {
    b.add(K::kTouch, path, {}, "create host /etc file mount point");
    b.add(K::kBindRo, path, path, "bind host /etc file read-only");
  }
}

base::Result<void> planEtc(const RunSpec& spec, PlanBuilder& b) {
  using K = MountOp::Kind;
  // A minimal generated /etc: only what name services, TLS and the dynamic loader need.
  b.mkdir("/etc");
  const std::string uid = std::to_string(spec.uid), gid = std::to_string(spec.gid);
  b.add(K::kWriteFile, "/etc/passwd", {}, "write /etc/passwd",
        "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:" + uid + ":" + gid +
            ":sandbox:/work:/bin/sh\n");
  b.add(K::kWriteFile, "/etc/group", {}, "write /etc/group", "root:x:0:\nsandbox:x:" + gid + ":\n");
  b.add(K::kWriteFile, "/etc/hosts", {}, "write /etc/hosts",
        "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n");
  b.add(K::kWriteFile, "/etc/hostname", {}, "write /etc/hostname", "sandbox\n");
  b.add(K::kWriteFile, "/etc/nsswitch.conf", {}, "write /etc/nsswitch.conf",
        "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
        "protocols: files\nservices: files\n");
  // With the proxy, sluice's own DNS server answers on 127.0.0.53 inside the sandbox (if the
  // caller serves it; else nothing does and a lookup fails at once). Without network, nothing
  // answers on 127.0.0.1:53: lookups fail at once (ECONNREFUSED).
  b.add(K::kWriteFile, "/etc/resolv.conf", {}, "write /etc/resolv.conf",
        spec.network_proxy ? "nameserver 127.0.0.53\noptions edns0 timeout:1 attempts:1\n"
                           : "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n");
  // The loader's cache, bound read-only rather than copied (43 KB here, read and written on
  // every run): it names the libraries under /usr/lib, which the sandbox sees anyway.
  if (fs::is_regular_file("/etc/ld.so.cache")) {
    b.add(K::kTouch, "/etc/ld.so.cache", {}, "create /etc/ld.so.cache mount point");
    b.add(K::kBindRo, "/etc/ld.so.cache", "/etc/ld.so.cache", "bind /etc/ld.so.cache");
  }
  {
    std::error_code ec;
    fs::path tz = fs::read_symlink("/etc/localtime", ec);
    if (!ec && tz.string().starts_with("/usr/share/zoneinfo/"))
      b.add(K::kSymlink, "/etc/localtime", tz.string(), "symlink /etc/localtime");
    else if (fs::exists("/usr/share/zoneinfo/UTC"))
      b.add(K::kSymlink, "/etc/localtime", "/usr/share/zoneinfo/UTC", "symlink /etc/localtime");
  }
  for (const char* path : kHostEtc) planHostEtcEntry(b, path);
  b.add(K::kSymlink, "/etc/mtab", "../proc/self/mounts", "symlink /etc/mtab");
  bool have_ca = false;
  for (const auto& [path, content] : spec.extra_files) {
    if (!path.starts_with("/etc/") || !safeRelative(path.substr(1)))
      return err("extra file", path + ": extra files must be under /etc/");
    b.parents(path);
    b.add(K::kWriteFile, path, {}, "write extra file", content);
    if (path == "/etc/ssl/certs/ca-certificates.crt") have_ca = true;
  }
  if (!have_ca && fs::is_regular_file("/etc/ssl/certs/ca-certificates.crt")) {
    b.parents("/etc/ssl/certs/ca-certificates.crt");
    b.add(K::kTouch, "/etc/ssl/certs/ca-certificates.crt", {}, "create CA bundle mount point");
    b.add(K::kBindRo, "/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt",
          "bind CA bundle");
  }

  return {};
}

void planProcAndDev(PlanBuilder& b, bool user_namespace) {
  using K = MountOp::Kind;
  // Fresh /proc of the sandbox's own pid namespace.
  b.mkdir("/proc");
  b.add(K::kProc, "/proc", {}, "mount /proc");

  // Minimal /dev: device nodes made here (not the host's devtmpfs), a private devpts.
  b.mkdir("/dev");
  b.add(K::kTmpfs, "/dev", "size=64k,nr_inodes=64,mode=0755", "mount /dev tmpfs");
  struct Node {
    const char* name;
    unsigned maj, min;
  };
  for (Node n : {Node{"null", 1, 3}, Node{"zero", 1, 5}, Node{"full", 1, 7}, Node{"random", 1, 8},
                 Node{"urandom", 1, 9}, Node{"tty", 5, 0}}) {
    const std::string node = std::string("/dev/") + n.name;
    if (!user_namespace) {
      b.add(K::kMknod, node, {}, "mknod in /dev", {}, 0666, makedev(n.maj, n.min));
    } else if (fs::exists(node)) {
      // mknod needs CAP_MKNOD in the initial namespace: bind the host's nodes instead.
      b.add(K::kTouch, node, {}, "create /dev node mount point");
      b.add(K::kBindRw, node, node, "bind /dev node");
    }
  }
  b.add(K::kMkdir, "/dev/pts", {}, "mkdir /dev/pts", {}, 0755);
  b.add(K::kDevpts, "/dev/pts", "newinstance,ptmxmode=0666,mode=0620", "mount /dev/pts");
  b.add(K::kSymlink, "/dev/ptmx", "pts/ptmx", "symlink /dev/ptmx");
  b.add(K::kSymlink, "/dev/fd", "/proc/self/fd", "symlink /dev/fd");
  b.add(K::kSymlink, "/dev/stdin", "/proc/self/fd/0", "symlink /dev/stdin");
  b.add(K::kSymlink, "/dev/stdout", "/proc/self/fd/1", "symlink /dev/stdout");
  b.add(K::kSymlink, "/dev/stderr", "/proc/self/fd/2", "symlink /dev/stderr");
  b.add(K::kMkdir, "/dev/shm", {}, "mkdir /dev/shm", {}, 0755);
  planProcMasks(b);  // binds the new /dev/null
}

std::vector<MountOp> planScratch(const RunSpec& spec, const std::string& s, PlanBuilder& b) {
  using K = MountOp::Kind;
  // One scratch tmpfs, sized by `disk`, behind /work, /tmp, /output and /dev/shm, so the disk
  // limit is one budget for all writable space.
  // stage_ops carry absolute paths in the staging tmpfs (outside the new root), and run first.
  const std::uint64_t disk = spec.limits.disk ? spec.limits.disk : (64ull << 20);
  std::vector<MountOp> stage_ops;
  stage_ops.push_back({K::kTmpfs,
                       s,
                       "size=" + std::to_string(disk) + ",nr_inodes=16384,mode=0700",
                       {},
                       0,
                       0,
                       "mount scratch tmpfs (disk limit)"});
  // Scratch directory -> where the sandbox sees it. Sticky ones are shared scratch (mode 1777
  // like the host's); the others belong to the sandbox user. /var/tmp and /var/cache are
  // where tools keep temporary files and caches (apt, pip, man-db); the rest of /var is absent.
  struct Dir {
    const char* scratch;
    const char* path;
    bool sticky;
  };
  constexpr Dir kDirs[] = {{"work", "/work", false},      {"tmp", "/tmp", true},
                           {"output", "/output", false},  {"shm", "/dev/shm", true},
                           {"var-tmp", "/var/tmp", true}, {"var-cache", "/var/cache", false}};
  for (const Dir& d : kDirs) {
    const std::string dir = s + "/" + d.scratch;
    stage_ops.push_back(
        {K::kMkdir, dir, {}, {}, d.sticky ? 01777u : 0755u, 0, "mkdir scratch dir"});
    if (!d.sticky) stage_ops.push_back({K::kChown, dir, {}, {}, 0, 0, "chown scratch dir"});
    const bool shm = std::string_view(d.path) == "/dev/shm";  // planProcAndDev made it
    b.parents(d.path);
    if (!shm) b.mkdir(d.path);
    b.add(K::kBindRw, d.path, dir, shm ? "bind /dev/shm" : "bind scratch dir");
  }

  return stage_ops;
}

// One step of the plan (the umask is 0: modes are exact).
StepResult applyOp(const MountOp& op, uid_t uid, gid_t gid) {
  using K = MountOp::Kind;
  const char* p = op.path.c_str();
  switch (op.kind) {
    case K::kMkdir:
      // The exact mode, sticky bit included (the umask is 0 here); one made earlier in the
      // plan gets it too.
      if (::mkdir(p, op.mode) != 0 && (errno != EEXIST || ::chmod(p, op.mode) != 0))
        return stepFail(op.step);
      break;
    case K::kSymlink:
      if (::symlink(op.source.c_str(), p) != 0) return stepFail(op.step);
      break;
    case K::kTouch:
      if (auto r = touch(p); !r) return stepFail(op.step, r.err);
      break;
    case K::kWriteFile:
      if (auto r = writeAll(p, op.content, op.mode); !r) return stepFail(op.step, r.err);
      break;
    case K::kBindRo:
    case K::kBindRw: {
      unsigned long flags = MS_NOSUID | op.keep_flags;
      // Device nodes bound from the host's /dev must stay usable.
      if (op.step == nullptr || std::strcmp(op.step, "bind /dev node") != 0) flags |= MS_NODEV;
      if (op.kind == K::kBindRo) flags |= MS_RDONLY;
      if (auto r = bindAndRemount(op.source.c_str(), p, flags, op.step); !r) return r;
      break;
    }
    case K::kOverlayRo:
      if (auto r = mountInputOverlay(op); !r) return r;
      break;
    case K::kMask:
      if (auto r = maskProcEntry(op); !r) return r;
      break;
    case K::kTmpfs:
      if (::mount("tmpfs", p, "tmpfs", MS_NOSUID, op.source.c_str()) != 0) return stepFail(op.step);
      break;
    case K::kProc:
      if (::mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
        return stepFail(op.step);
      break;
    case K::kDevpts:
      if (::mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, op.source.c_str()) != 0)
        return stepFail(op.step);
      break;
    case K::kMknod:
      if (::mknod(p, S_IFCHR | 0666, op.dev) != 0) return stepFail(op.step);  // umask 0
      break;
    case K::kChown:
      if (::chown(p, uid, gid) != 0) return stepFail(op.step);
      break;
  }
  return stepOk();
}

// The process's umask for the lifetime of a scope (the program inherits init's, which must be
// the caller's again when the plan is applied).
class UmaskScope {
 public:
  explicit UmaskScope(mode_t mask) : old_(::umask(mask)) {}
  ~UmaskScope() { ::umask(old_); }
  UmaskScope(const UmaskScope&) = delete;
  UmaskScope& operator=(const UmaskScope&) = delete;

 private:
  mode_t old_;
};

}  // namespace
base::Result<MountPlan> buildMountPlan(const RunSpec& spec, bool user_namespace) {
  MountPlan plan;
  auto stage = chooseStage(spec, user_namespace);
  if (!stage) return std::unexpected(stage.error());
  plan.stage = std::move(*stage);
  plan.new_root = plan.stage + "/root";
  plan.scratch = plan.stage + "/scratch";
  PlanBuilder b(plan.new_root);
  using K = MountOp::Kind;
  planSystemDirs(b);
  if (auto r = planEtc(spec, b); !r) return std::unexpected(r.error());
  if (auto r = planHostMounts(spec, b); !r) return std::unexpected(r.error());
  planProcAndDev(b, user_namespace);
  std::vector<MountOp> stage_ops = planScratch(spec, plan.scratch, b);
  if (auto r = planInputs(spec, plan.stage, user_namespace, b, stage_ops); !r)
    return std::unexpected(r.error());
  plan.ops = std::move(stage_ops);
  for (MountOp& op : b.take()) plan.ops.push_back(std::move(op));
  // A remount must keep flags the source mount has (in a user namespace they are locked and
  // dropping one is EPERM): carry them over. Sources in the staging tmpfs (scratch, inputs'
  // overlays) are not the host's.
  for (MountOp& op : plan.ops)
    if ((op.kind == K::kBindRo || op.kind == K::kBindRw) &&
        !op.source.starts_with(plan.stage + "/"))
      op.keep_flags = sourceFlags(op.source);
  return plan;
}

// Child side. Everything below runs between clone and exec: syscalls only.
StepResult applyMountPlan(const MountPlan& plan, uid_t uid, gid_t gid) {
  // Every mode in the plan is exact: with no umask, mkdir, mknod and open(O_CREAT) set it in
  // one call, without a chmod after each.
  const UmaskScope no_umask(0);
  // Our mounts must not propagate back to the host (systemd makes / shared).
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return stepFail("make mounts private");
  if (::mount("tmpfs", plan.stage.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              "size=64k,nr_inodes=1024,mode=0700") != 0)
    return stepFail("mount staging tmpfs");
  if (::mkdir(plan.new_root.c_str(), 0755) != 0 || ::mkdir(plan.scratch.c_str(), 0700) != 0)
    return stepFail("mkdir in staging tmpfs");
  // The scratch tmpfs stays alive through its binds after the old root (holding the staging
  // tmpfs and its mount points) is detached.
  if (::mount("tmpfs", plan.new_root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              "size=16m,nr_inodes=16384,mode=0755") != 0)
    return stepFail("mount new root tmpfs");
  for (const MountOp& op : plan.ops)
    if (auto r = applyOp(op, uid, gid); !r) return r;
  // pivot_root(".", "."): stacks the old root on top of the new one; detaching it leaves
  // nothing of the host reachable (unlike chroot, which keeps the old tree mounted).
  if (::chdir(plan.new_root.c_str()) != 0) return stepFail("chdir new root");
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return stepFail("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return stepFail("detach old root");
  if (::chdir("/") != 0) return stepFail("chdir /");
  // The root tmpfs (/etc, mount points) becomes read-only: writable space is only the scratch.
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return stepFail("remount root read-only");
  return stepOk();
}

}  // namespace sluice::runner::detail
