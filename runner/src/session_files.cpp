// A session's file operations (see session_files.hpp).
#include "session_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "artifacts.hpp"
#include "fd.hpp"
#include "sandbox_paths.hpp"
#include "sluice/base/digest.hpp"

namespace sluice::runner::detail {
namespace {

constexpr std::size_t kMaxListed = 10000;
constexpr int kNotRegular = 1 << 20;  // not an errno: the file is a fifo, socket or device

std::string failure(const std::string& path, int err) {
  if (err == EXDEV) return path + ": leads outside the sandbox's /work, /tmp and /output";
  if (err == ELOOP) return path + ": is a symbolic link (or leads through a /proc link)";
  if (err == ENXIO || err == kNotRegular) return path + ": not a regular file";
  return path + ": " + std::strerror(err);
}

// openat2 from the sandbox's root: ".." stops at the root, absolute symlinks are taken from
// the root, and /proc's magic links (/proc/PID/root, /proc/PID/fd/N, ...) are refused.
int openInRoot(int root, const std::string& relative, int flags) {
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root, relative.c_str(), &how, sizeof how));
}

// 0 when `fd` is on the scratch tmpfs (and, with `want`, of that file type); else an errno.
int checkScratch(const SandboxRoot& r, int fd, mode_t want = 0) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno;
  if (st.st_dev != r.scratch_dev) return EXDEV;
  if (want != 0 && (st.st_mode & S_IFMT) != want) return want == S_IFDIR ? ENOTDIR : kNotRegular;
  return 0;
}

// The directory `relative` (symlinks followed inside the root), which must be on the scratch.
std::expected<Fd, int> openScratchDir(const SandboxRoot& r, const std::string& relative) {
  Fd fd(openInRoot(r.root_fd, relative, O_PATH | O_DIRECTORY));
  if (!fd) return std::unexpected(errno);
  if (int e = checkScratch(r, fd.get(), S_IFDIR); e != 0) return std::unexpected(e);
  return fd;
}

// The missing directories leading to the file, made one by one below the scratch directory
// (never through a symlink), owned by the sandbox user.
std::expected<Fd, int> makeParents(const SandboxRoot& r, const ScratchPath& p) {
  auto cur = openScratchDir(r, p.top);
  if (!cur) return cur;
  for (std::size_t i = 0; i + 1 < p.parts.size(); ++i) {
    const char* name = p.parts[i].c_str();
    const int flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    Fd next(::openat(cur->get(), name, flags));
    if (!next && errno == ENOENT) {
      if (::mkdirat(cur->get(), name, 0755) != 0 && errno != EEXIST) return std::unexpected(errno);
      next.reset(::openat(cur->get(), name, flags));
      if (next && ::fchownat(next.get(), "", r.uid, r.gid, AT_EMPTY_PATH) != 0)
        return std::unexpected(errno);
    }
    if (!next) return std::unexpected(errno);
    if (int e = checkScratch(r, next.get(), S_IFDIR); e != 0) return std::unexpected(e);
    *cur = std::move(next);
  }
  return cur;
}

// The directory holding the file `p` names.
std::expected<Fd, int> openParent(const SandboxRoot& r, const ScratchPath& p, bool create) {
  ScratchPath parent = p;
  parent.parts.pop_back();
  auto dir = openScratchDir(r, parent.relative());
  if (!dir && dir.error() == ENOENT && create) return makeParents(r, p);
  return dir;
}

// The file itself, relative to its verified directory: never a symlink, never blocking on a
// fifo (O_NONBLOCK), never a controlling terminal; then it must be a regular file.
std::expected<Fd, int> openFile(const SandboxRoot& r, int dir, const std::string& name, int flags) {
  Fd fd(::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644));
  if (!fd) return std::unexpected(errno);
  if (int e = checkScratch(r, fd.get(), S_IFREG); e != 0) return std::unexpected(e);
  return fd;
}

}  // namespace

std::expected<dev_t, std::string> scratchDevice(int root_fd) {
  Fd fd(openInRoot(root_fd, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return std::unexpected(failure("/work", errno));
  return st.st_dev;
}

namespace {

/// A scratch file opened for writing: created if need be, owned by the sandbox's user, empty.
struct WritableFile {
  ScratchPath path;
  Fd fd;
};

std::expected<WritableFile, std::string> openForWriting(const SandboxRoot& r,
                                                        const std::string& path) {
  auto p = parseScratchPath(path);
  if (!p) return std::unexpected(p.error());
  if (p->parts.empty()) return std::unexpected(failure(path, EISDIR));
  auto dir = openParent(r, *p, true);
  if (!dir) return std::unexpected(failure(path, dir.error()));
  auto fd = openFile(r, dir->get(), p->parts.back(), O_WRONLY | O_CREAT);
  if (!fd) return std::unexpected(failure(path, fd.error()));
  if (::fchown(fd->get(), r.uid, r.gid) != 0 || ::ftruncate(fd->get(), 0) != 0)
    return std::unexpected(failure(path, errno));
  return WritableFile{std::move(*p), std::move(*fd)};
}

}  // namespace

std::expected<FileInfo, std::string> writeSandboxFile(const SandboxRoot& r, const std::string& path,
                                                      std::string_view data) {
  auto f = openForWriting(r, path);
  if (!f) return std::unexpected(f.error());
  if (!writeAll(f->fd.get(), data)) return std::unexpected(failure(path, errno));
  return FileInfo{f->path.sandbox(), data.size(), base::sha256Hex(data), false};
}

// As writeSandboxFile, with the bytes read from `from` (an upload spooled by the daemon) in
// chunks: the content is never held in memory whole.
std::expected<FileInfo, std::string> writeSandboxFileFrom(const SandboxRoot& r,
                                                          const std::string& path, int from) {
  auto f = openForWriting(r, path);
  if (!f) return std::unexpected(f.error());
  base::Sha256 md;
  std::uint64_t total = 0;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(from, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(path + ": reading the upload: " + std::strerror(errno));
    if (n == 0) break;
    if (!writeAll(f->fd.get(), std::string_view(buf, static_cast<std::size_t>(n))))
      return std::unexpected(failure(path, errno));
    md.update(std::string_view(buf, static_cast<std::size_t>(n)));
    total += static_cast<std::uint64_t>(n);
  }
  return FileInfo{f->path.sandbox(), total, md.finishHex(), false};
}

std::expected<std::string, std::string> readSandboxFile(const SandboxRoot& r,
                                                        const std::string& path,
                                                        std::uint64_t max_bytes) {
  auto p = parseScratchPath(path);
  if (!p) return std::unexpected(p.error());
  if (p->parts.empty()) return std::unexpected(failure(path, EISDIR));
  auto dir = openParent(r, *p, false);
  if (!dir) return std::unexpected(failure(path, dir.error()));
  auto fd = openFile(r, dir->get(), p->parts.back(), O_RDONLY);
  if (!fd) return std::unexpected(failure(path, fd.error()));
  auto tooLarge = [&] {
    return std::unexpected(path + ": too large (more than " + std::to_string(max_bytes) +
                           " bytes)");
  };
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return std::unexpected(failure(path, errno));
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) return tooLarge();
  std::string out;
  char buf[65536];
  for (;;) {  // the sandbox may still be writing it: never more than max_bytes
    const ssize_t n = ::read(fd->get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(failure(path, errno));
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) return tooLarge();
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::expected<std::vector<FileInfo>, std::string> listSandboxDir(const SandboxRoot& r,
                                                                 const std::string& path) {
  auto p = parseScratchPath(path);
  if (!p) return std::unexpected(p.error());
  auto dir = openScratchDir(r, p->relative());
  if (!dir) return std::unexpected(failure(path, dir.error()));
  DIR* d = ::fdopendir(::openat(dir->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d == nullptr) return std::unexpected(failure(path, errno));
  std::vector<FileInfo> out;
  std::size_t seen = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || !safeArtifactName(name)) continue;
    if (++seen > kMaxListed) break;
    struct stat st {};
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) continue;  // links, fifos, sockets
    out.push_back({p->sandbox() + "/" + name,
                   S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0, "",
                   S_ISDIR(st.st_mode)});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(),
            [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
  return out;
}

}  // namespace sluice::runner::detail
