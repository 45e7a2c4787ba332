// Collecting /output (see artifacts.hpp).
#include "artifacts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace sluice::runner::detail {
namespace {

namespace fs = std::filesystem;

struct Walker {
  fs::path dest;
  std::vector<Artifact> out;
  std::string error;
  int entries = 0;

  std::string hex(const unsigned char* d, unsigned n) {
    static const char* k = "0123456789abcdef";
    std::string s;
    for (unsigned i = 0; i < n; ++i) {
      s += k[d[i] >> 4];
      s += k[d[i] & 15];
    }
    return s;
  }

  bool copyFile(int dirfd, const std::string& name, const std::string& rel) {
    // O_NOFOLLOW: a symlink planted in /output must not make sluice read a host file.
    int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return true;  // vanished or not openable: skip
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return true;
    }
    int outfd = -1;
    if (!dest.empty()) {
      fs::path target = dest / rel;
      std::error_code ec;
      fs::create_directories(target.parent_path(), ec);
      outfd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (outfd < 0) {
        error = target.string() + ": " + std::strerror(errno);
        ::close(fd);
        return false;
      }
    }
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr);
    char buf[65536];
    std::uint64_t total = 0;
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      EVP_DigestUpdate(md.get(), buf, static_cast<size_t>(n));
      total += static_cast<std::uint64_t>(n);
      if (outfd >= 0 && ::write(outfd, buf, static_cast<size_t>(n)) != n) {
        error = (dest / rel).string() + ": " + std::strerror(errno);
        ::close(fd);
        ::close(outfd);
        return false;
      }
    }
    ::close(fd);
    if (outfd >= 0) ::close(outfd);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(md.get(), digest, &len);
    out.push_back({rel, total, hex(digest, len)});
    return true;
  }

  bool walk(int dirfd, const std::string& prefix, int depth) {
    if (depth > 32) return true;
    int dup = ::dup(dirfd);
    DIR* d = ::fdopendir(dup);
    if (d == nullptr) {
      ::close(dup);
      return true;
    }
    std::vector<std::pair<std::string, unsigned char>> names;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      if (++entries > 10000) break;
      names.emplace_back(e->d_name, e->d_type);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& [name, type] : names) {
      const std::string rel = prefix.empty() ? name : prefix + "/" + name;
      if (type == DT_DIR) {
        int sub = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) continue;
        bool ok = walk(sub, rel, depth + 1);
        ::close(sub);
        if (!ok) return false;
      } else if (type == DT_REG) {
        if (!copyFile(dirfd, name, rel)) return false;
      }
    }
    return true;
  }
};

}  // namespace

std::expected<std::vector<Artifact>, std::string> collectArtifacts(const fs::path& source,
                                                                   const fs::path& dest) {
  int root = ::open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return std::unexpected(source.string() + ": " + std::strerror(errno));
  Walker w;
  w.dest = dest;
  if (!dest.empty()) {
    std::error_code ec;
    fs::create_directories(dest, ec);
    if (ec) {
      ::close(root);
      return std::unexpected(dest.string() + ": " + ec.message());
    }
  }
  bool ok = w.walk(root, "", 0);
  ::close(root);
  if (!ok) return std::unexpected(w.error);
  return std::move(w.out);
}

}  // namespace sluice::runner::detail
