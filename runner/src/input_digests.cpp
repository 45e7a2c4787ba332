// The receipt's input list (see input_digests.hpp): a walk of each --input that never follows a
// symlink, then a sha256 of every regular file found, read as it is while the run starts.
#include "input_digests.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "sluice/base/digest.hpp"

namespace sluice::runner::detail {
namespace {

namespace fs = std::filesystem;

// One file found by the walk, not yet hashed.
struct Found {
  std::string path;    // in the sandbox
  std::string source;  // on the host
};

// Opens a host file for hashing. O_NOFOLLOW refuses a last component swapped for a symlink
// since the walk; openat2's RESOLVE_NO_SYMLINKS refuses one anywhere in the path (the walk
// resolved the input's own symlinks, so there are none left legitimately). O_NONBLOCK: a file
// swapped for a FIFO meanwhile must not block the open.
int openNoFollow(const std::string& path) {
  const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags);
  how.resolve = RESOLVE_NO_SYMLINKS;
  const long fd = ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  return ::open(path.c_str(), flags);  // a kernel before 5.6
}

InputFile hashFile(Found f, std::vector<char>& buf, const std::stop_token& stop) {
  InputFile out{std::move(f.path), std::move(f.source), 0, {}, {}};
  const int fd = openNoFollow(out.source);
  if (fd < 0) {
    out.error = std::strerror(errno);
    return out;
  }
  struct stat st {};
  // EINVAL: no longer a regular file (swapped since the walk).
  const int why = ::fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EINVAL;
  if (why != 0) {
    out.error = std::strerror(why);
    ::close(fd);
    return out;
  }
  base::Sha256 md;
  for (;;) {
    if (stop.stop_requested()) break;
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.error = std::strerror(errno);
      break;
    }
    if (n == 0) break;
    md.update(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    out.bytes += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  if (!out.error.empty()) return out;
  out.sha256 = md.finishHex();
  return out;
}

// The sorted names in one directory (opened without following a symlink), with their types
// as lstat sees them.
std::vector<std::pair<std::string, mode_t>> listDirectory(const std::string& dir) {
  std::vector<std::pair<std::string, mode_t>> out;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return out;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return out;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) out.emplace_back(name, st.st_mode);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Depth first, names sorted; stops once more than kMaxInputFiles files are found in all.
void walkDirectory(const std::string& host, const std::string& sandbox, std::vector<Found>& found,
                   bool& truncated, const std::stop_token& stop) {
  std::vector<std::pair<std::string, std::string>> todo = {{host, sandbox}};
  while (!todo.empty() && !truncated && !stop.stop_requested()) {
    auto [h, s] = std::move(todo.back());
    todo.pop_back();
    std::vector<std::pair<std::string, std::string>> subdirs;
    for (const auto& [name, mode] : listDirectory(h)) {
      if (S_ISDIR(mode)) {
        subdirs.emplace_back(h + "/" + name, s + "/" + name);
      } else if (found.size() == kMaxInputFiles) {
        truncated = true;
        return;
      } else {
        found.push_back({s + "/" + name, h + "/" + name});
      }
    }
    todo.insert(todo.end(), subdirs.rbegin(), subdirs.rend());  // first name popped first
  }
}

}  // namespace

InputDigests digestInputs(const std::vector<Input>& inputs, std::stop_token stop) {
  InputDigests out;
  std::vector<Found> found;
  for (const Input& in : inputs) {
    // The input itself as the mount resolves it (mounts.cpp planInputs: fs::canonical).
    std::error_code ec;
    const fs::path host = fs::canonical(in.host, ec);
    struct stat st {};
    if (ec || ::lstat(host.c_str(), &st) != 0) continue;  // the mount step fails the run
    const std::string sandbox = "/input/" + in.sandbox;
    if (S_ISDIR(st.st_mode)) {
      walkDirectory(host.string(), sandbox, found, out.truncated, stop);
    } else if (S_ISREG(st.st_mode)) {
      if (found.size() == kMaxInputFiles)
        out.truncated = true;
      else
        found.push_back({sandbox, host.string()});
    }
    if (out.truncated) break;
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.path < b.path; });
  out.files.reserve(found.size());
  std::vector<char> buf(1 << 16);
  for (Found& f : found) {
    if (stop.stop_requested()) break;
    out.files.push_back(hashFile(std::move(f), buf, stop));
  }
  return out;
}

InputDigester::InputDigester(const std::vector<Input>& inputs) {
  if (inputs.empty()) return;  // a run without --input pays for no thread
  thread_ = std::jthread(
      [this, inputs](std::stop_token stop) { result_ = digestInputs(inputs, std::move(stop)); });
}

InputDigests InputDigester::take() {
  if (thread_.joinable()) thread_.join();
  return std::move(result_);
}

}  // namespace sluice::runner::detail
