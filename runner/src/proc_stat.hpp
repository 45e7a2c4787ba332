// One read of /proc/PID/stat and its numeric fields by number (proc(5)): the start time that
// tells a live cgroup owner from a reused pid (gc), this process's thread count (launch) and
// where its argv strings live (findOwnArgv). No allocation, no exception.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace sluice::runner::detail {

class ProcStat {
 public:
  /// /proc/PID/stat, or this process's when `pid` is 0.
  explicit ProcStat(pid_t pid = 0) {
    char path[32];
    if (pid == 0)
      std::snprintf(path, sizeof path, "/proc/self/stat");
    else
      std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    const ssize_t n = ::read(fd, buf_, sizeof buf_ - 1);
    ::close(fd);
    if (n <= 0) return;
    buf_[n] = '\0';
    // The command name (field 2) may hold spaces and parentheses: fields resume after the
    // last ')', with field 3.
    rest_ = std::strrchr(buf_, ')');
    if (rest_) ++rest_;
  }

  /// Field `n` (3 or later) as an unsigned number; nullopt when the file could not be read or
  /// the field is missing or not a number.
  std::optional<std::uint64_t> field(int n) const {
    if (!rest_ || n < 3) return std::nullopt;
    const char* p = rest_;
    for (int i = 3; i < n; ++i) {  // skip fields 3..n-1
      while (*p == ' ') ++p;
      while (*p != ' ' && *p != '\0') ++p;
    }
    while (*p == ' ') ++p;
    if (*p < '0' || *p > '9') return std::nullopt;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(p, &end, 10);
    if (*end != ' ' && *end != '\0' && *end != '\n') return std::nullopt;
    return v;
  }

 private:
  char buf_[1024] = {};  // the whole line: a 15-byte name and 50 numbers fit
  const char* rest_ = nullptr;
};

}  // namespace sluice::runner::detail
