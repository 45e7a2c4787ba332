// systemd's socket-activation and journal conventions, read from the environment
// (systemd.hpp); the protocol is sd_listen_fds(3) and systemd.exec(5) "JOURNAL_STREAM".
#include "sluice/serve/systemd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

namespace sluice::serve {
namespace {

// The first passed descriptor (SD_LISTEN_FDS_START): 0-2 stay stdin, stdout and stderr.
constexpr int kFirstFd = 3;

template <typename T>
bool parseNumber(const char* text, T& out) {
  if (text == nullptr) return false;
  const std::string_view s(text);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// LISTEN_FDNAMES: colon-separated, one per fd; missing names are empty.
std::vector<std::string> splitNames(const char* text, std::size_t count) {
  std::vector<std::string> names(count);
  std::string_view rest = text == nullptr ? std::string_view() : std::string_view(text);
  for (std::size_t i = 0; i < count && !rest.empty(); ++i) {
    const auto colon = rest.find(':');
    names[i] = std::string(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  return names;
}

}  // namespace

std::vector<InheritedSocket> takeSystemdSockets() {
  pid_t pid = 0;
  int count = 0;
  const bool ours = parseNumber(std::getenv("LISTEN_PID"), pid) && pid == ::getpid() &&
                    parseNumber(std::getenv("LISTEN_FDS"), count) && count > 0;
  const std::vector<std::string> names =
      splitNames(std::getenv("LISTEN_FDNAMES"), ours ? static_cast<std::size_t>(count) : 0);
  // Removed whatever they said: meant for this process only (a child would misread them).
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  std::vector<InheritedSocket> sockets;
  if (!ours) return sockets;
  for (int i = 0; i < count; ++i) {
    const int fd = kFirstFd + i;
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0) continue;  // not open: nothing to take
    ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    sockets.push_back({fd, names[static_cast<std::size_t>(i)]});
  }
  return sockets;
}

bool stderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  const std::string_view s(stream);
  const auto colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  unsigned long long dev = 0, ino = 0;
  const std::string dev_text(s.substr(0, colon)), ino_text(s.substr(colon + 1));
  struct stat st {};
  return parseNumber(dev_text.c_str(), dev) && parseNumber(ino_text.c_str(), ino) &&
         ::fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

}  // namespace sluice::serve
