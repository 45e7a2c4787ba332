// Body reading helpers (http_body.hpp).
#include "http_body.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace sluice::serve {

SpooledBody::~SpooledBody() {
  if (fd >= 0) ::close(fd);
}

namespace detail {

// Built outside co_await expressions: g++ 12 miscompiles braced aggregates with string literals
// inside them.
Refusal refusal(int status, const char* reason, std::string message, unsigned retry_after) {
  return Refusal{status, reason, std::move(message), retry_after};
}

// An unlinked file in `dir` for a spooled body (O_TMPFILE; a named file unlinked at once where
// the file system lacks it).
std::shared_ptr<SpooledBody> openSpool(const std::string& dir_option) {
  std::error_code ec;
  const std::string dir =
      dir_option.empty() ? std::filesystem::temp_directory_path(ec).string() : dir_option;
  auto spool = std::make_shared<SpooledBody>();
  spool->fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (spool->fd < 0) {
    std::string path = dir + "/sluice-upload-XXXXXX";
    spool->fd = ::mkostemp(path.data(), O_CLOEXEC);
    if (spool->fd < 0) return nullptr;
    ::unlink(path.c_str());
  }
  return spool;
}

bool writeAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace detail
}  // namespace sluice::serve
