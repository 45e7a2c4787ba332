// Collecting /output (see artifacts.hpp).
#include "artifacts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "sluice/base/digest.hpp"

namespace sluice::runner {

std::string_view artifactSkipName(ArtifactSkip s) {
  switch (s) {
    case ArtifactSkip::kDiskBudget:
      return "disk_budget";
    case ArtifactSkip::kEntries:
      return "entries";
    case ArtifactSkip::kDepth:
      return "depth";
    case ArtifactSkip::kName:
      return "name";
  }
  return "";
}

namespace detail {

bool safeArtifactName(std::string_view name) {
  const auto* p = reinterpret_cast<const unsigned char*>(name.data());
  const std::size_t n = name.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    std::uint32_t min = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;  // a continuation byte first, or 0xf8..0xff
    }
    if (n - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    // C1 controls too: U+009B is CSI to many terminals, as good as a raw ESC.
    if (cp >= 0x80 && cp <= 0x9f) return false;
    i += len;
  }
  return true;
}

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kChunk = 64 * 1024;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

void hashZeros(base::Sha256& md, std::uint64_t n) {
  static const char zeros[kChunk] = {};
  while (n > 0) {
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, kChunk));
    md.update(std::string_view(zeros, k));
    n -= k;
  }
}

bool pwriteAll(int fd, const char* p, std::size_t n, std::uint64_t off) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w, n -= static_cast<std::size_t>(w), off += static_cast<std::uint64_t>(w);
  }
  return true;
}

// Hashes the first `size` bytes of `in` (holes as the zeros they read as) and writes its data
// extents to `out` at the same offsets (when out >= 0), so a hole costs neither a read nor host
// disk space: SEEK_DATA/SEEK_HOLE (tmpfs has them; elsewhere lseek fails with EINVAL and the
// whole file is read as data). Returns the bytes hashed (fewer than `size` if the file shrank),
// or the errno of a failed write.
std::expected<std::uint64_t, int> copySparse(int in, int out, std::uint64_t size,
                                             base::Sha256& md) {
  char buf[kChunk];
  std::uint64_t off = 0;
  while (off < size) {
    const off_t data = ::lseek(in, static_cast<off_t>(off), SEEK_DATA);
    std::uint64_t start = off;
    if (data >= 0)
      start = std::min<std::uint64_t>(static_cast<std::uint64_t>(data), size);
    else if (errno == ENXIO)
      start = size;  // nothing but a hole up to the end
    hashZeros(md, start - off);
    off = start;
    if (off >= size) break;
    const off_t hole = ::lseek(in, static_cast<off_t>(off), SEEK_HOLE);
    std::uint64_t end = hole > static_cast<off_t>(off)
                            ? std::min<std::uint64_t>(static_cast<std::uint64_t>(hole), size)
                            : size;
    while (off < end) {
      const ssize_t n =
          ::pread(in, buf, std::min<std::uint64_t>(end - off, kChunk), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return off;  // shrank under us, or unreadable: what was read so far
      md.update(std::string_view(buf, static_cast<std::size_t>(n)));
      if (out >= 0 && !pwriteAll(out, buf, static_cast<std::size_t>(n), off))
        return std::unexpected(errno);
      off += static_cast<std::uint64_t>(n);
    }
  }
  return off;
}

struct Entry {
  std::string name;
  unsigned char type;
};

class Walker {
 public:
  Walker(std::uint64_t budget, fs::path dest) : remaining_(budget), dest_(std::move(dest)) {}

  // Collects the directory `src` (relative path `prefix`, `depth` levels below the root) into
  // `dst` (-1: hash only). False on a host-side failure (then `error()`).
  bool walk(int src, int dst, const std::string& prefix, int depth) {
    for (const Entry& e : readNames(src)) {
      unsigned char type = e.type;
      if (type == DT_UNKNOWN) {  // some file systems leave the type to a stat
        struct stat st {};
        if (::fstatat(src, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
      }
      // Symlinks, fifos, sockets and devices are never opened: a link could point at the
      // host's files (through /proc/<init>/root), a fifo or device could block or act on open.
      if (type != DT_DIR && type != DT_REG) continue;
      if (!safeArtifactName(e.name)) {
        skip(ArtifactSkip::kName);
        continue;
      }
      const std::string rel = prefix.empty() ? e.name : prefix + "/" + e.name;
      if (type == DT_REG) {
        if (!collectFile(src, dst, e.name, rel)) return false;
        continue;
      }
      if (depth + 1 > kMaxArtifactDepth) {
        skip(ArtifactSkip::kDepth);
        continue;
      }
      Fd sub(::openat(src, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) continue;  // replaced by something else: nothing to collect
      Fd sub_dst;
      if (dst >= 0) {
        // The host side is walked by fd too: O_NOFOLLOW so that no name, however it got into
        // --output-dir, makes a write land outside it.
        if (::mkdirat(dst, e.name.c_str(), 0755) != 0 && errno != EEXIST) return fail(rel);
        sub_dst.reset(
            ::openat(dst, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub_dst) return fail(rel);
      }
      if (!walk(sub.get(), sub_dst.get(), rel, depth + 1)) return false;
    }
    return true;
  }

  CollectedArtifacts take() { return std::move(result_); }
  const std::string& error() const { return error_; }

 private:
  void skip(ArtifactSkip why, std::uint64_t n = 1) {
    if (!result_.truncated) result_.truncated = ArtifactsTruncated{why, 0};
    result_.truncated->skipped += n;
  }

  bool fail(const std::string& rel) {
    error_ = (dest_ / rel).string() + ": " + std::strerror(errno);
    return false;
  }

  // The names in `dir`, sorted; past kMaxArtifactEntries in all, only counted as skipped.
  std::vector<Entry> readNames(int dir) {
    std::vector<Entry> names;
    // A fresh open of "." rather than dup(): readdir needs its own file offset.
    const int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return names;
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      ::close(fd);
      return names;
    }
    std::uint64_t over = 0;
    while (const dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      if (entries_ >= kMaxArtifactEntries) {
        ++over;
        continue;
      }
      ++entries_;
      names.push_back({e->d_name, e->d_type});
    }
    ::closedir(d);
    if (over > 0) skip(ArtifactSkip::kEntries, over);
    std::sort(names.begin(), names.end(),
              [](const Entry& a, const Entry& b) { return a.name < b.name; });
    return names;
  }

  bool collectFile(int src, int dst, const std::string& name, const std::string& rel) {
    // O_NOFOLLOW: a symlink swapped in is not followed; O_NONBLOCK, O_NOCTTY: a fifo or tty
    // swapped in neither blocks nor becomes ours. fstat then rejects anything not regular.
    Fd in(::openat(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!in) return true;
    struct stat st {};
    if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) return true;
    // A file costs what it could cost the host: its apparent size (a sparse file is read in
    // full to hash it and is that long on the host) or its blocks (fallocate past the end),
    // whichever is more. A file that does not fit is skipped whole, never cut short.
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::uint64_t cost = std::max(size, static_cast<std::uint64_t>(st.st_blocks) * 512);
    if (cost > remaining_) {
      skip(ArtifactSkip::kDiskBudget);
      return true;
    }
    remaining_ -= cost;
    Fd out(dst >= 0 ? ::openat(dst, name.c_str(),
                               O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644)
                    : -1);
    if (dst >= 0 && !out) return fail(rel);
    base::Sha256 md;
    auto copied = copySparse(in.get(), out.get(), size, md);
    if (!copied) {
      errno = copied.error();
      return fail(rel);
    }
    // A trailing hole is no write at all: the length makes it.
    if (out && ::ftruncate(out.get(), static_cast<off_t>(*copied)) != 0) return fail(rel);
    result_.files.push_back({rel, *copied, md.finishHex()});
    return true;
  }

  std::uint64_t remaining_;
  fs::path dest_;
  int entries_ = 0;
  CollectedArtifacts result_;
  std::string error_;
};

// The budget: the caller's, and never more than the file system holding /output (the
// sandbox's tmpfs, sized by `disk`) can hold, whatever the caller passed.
std::uint64_t effectiveBudget(int root, std::uint64_t budget) {
  std::uint64_t b = budget ? budget : std::numeric_limits<std::uint64_t>::max();
  struct statvfs sv {};
  if (::fstatvfs(root, &sv) == 0 && sv.f_blocks > 0)
    b = std::min<std::uint64_t>(b, static_cast<std::uint64_t>(sv.f_blocks) * sv.f_frsize);
  return b;
}

}  // namespace

std::expected<CollectedArtifacts, std::string> collectArtifacts(const fs::path& source,
                                                                const fs::path& dest,
                                                                std::uint64_t budget) {
  Fd root(::open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return std::unexpected(source.string() + ": " + std::strerror(errno));
  int out_fd = -1;
  if (!dest.empty()) {
    std::error_code ec;
    fs::create_directories(dest, ec);
    if (ec) return std::unexpected(dest.string() + ": " + ec.message());
    // The caller's own path: it may be (or pass through) a symlink of the caller's choosing.
    out_fd = ::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out_fd < 0) return std::unexpected(dest.string() + ": " + std::strerror(errno));
  }
  Fd out(out_fd);
  Walker w(effectiveBudget(root.get(), budget), dest);
  if (!w.walk(root.get(), out.get(), "", 0)) return std::unexpected(w.error());
  return w.take();
}

}  // namespace detail
}  // namespace sluice::runner
