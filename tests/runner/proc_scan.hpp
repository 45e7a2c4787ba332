// Test helpers that look at the host's state: files whole, other processes through /proc
// (finding a sandbox's init, searching a process's memory for a value it must not hold) and
// the cgroups sluice left (or did not leave) behind.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::testing {

/// What a command printed and how it ended (integration tests run the real binary).
struct Outcome {
  int status = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p);

/// Runs `binary args...` with `env` (NAME=VALUE) added, stdout and stderr captured through
/// files in `dir` (no pipe-size deadlocks). `as_uid` >= 0: drop to that uid/gid first, in
/// `dir` (an unprivileged caller).
inline Outcome runBinary(const char* binary, const std::filesystem::path& dir,
                         const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {}, int as_uid = -1) {
  const std::filesystem::path out = dir / "stdout", err = dir / "stderr";
  pid_t pid = ::fork();
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(o, 1);
    ::dup2(e, 2);
    if (as_uid >= 0) {
      if (::chdir(dir.c_str()) != 0 || ::setgroups(0, nullptr) != 0 || ::setgid(as_uid) != 0 ||
          ::setuid(as_uid) != 0)
        ::_exit(98);
    }
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv{const_cast<char*>(binary)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(binary, argv.data());
    ::_exit(99);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  Outcome r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

/// Runs `cmd` with /bin/sh, stderr folded into stdout: its exit status and output.
inline std::pair<int, std::string> shellOutput(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  char b[4096];
  while (std::fgets(b, sizeof b, p)) out += b;
  const int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

/// A file's whole content ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

/// Names of the execution cgroups under sluice's parent cgroup (v1 pids and memory hierarchies,
/// v2 root): "<sluice pid>.<start time>.<execution id>".
inline std::vector<std::string> sluiceCgroupNames() {
  std::vector<std::string> out;
  for (const char* h :
       {"/sys/fs/cgroup/pids/sluice", "/sys/fs/cgroup/memory/sluice", "/sys/fs/cgroup/sluice"}) {
    std::error_code ec;
    if (!std::filesystem::is_directory(h, ec)) continue;
    for (const auto& e : std::filesystem::directory_iterator(h, ec))
      if (e.is_directory()) out.push_back(e.path().filename().string());
  }
  return out;
}

/// Processes whose parent is `parent` and whose name (/proc/PID/stat comm) is `comm`.
inline std::vector<pid_t> childrenNamed(pid_t parent, const std::string& comm) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || stat.find("(" + comm + ")") == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent)
      out.push_back(std::stoi(name));
  }
  return out;
}

/// childrenNamed(), retried for up to `wait` until one appears (init names itself first thing,
/// but a caller may look before it has run at all).
inline std::vector<pid_t> waitForChildrenNamed(pid_t parent, const std::string& comm,
                                               std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto found = childrenNamed(parent, comm);
    if (!found.empty() || std::chrono::steady_clock::now() >= deadline) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

struct MemoryScan {
  std::size_t scanned = 0;        // bytes read
  std::vector<std::string> hits;  // /proc/PID/maps lines of mappings holding the needle
  bool gone = false;              // the process exited before its map could be read
};

/// Reads every readable mapping of `pid` (as root) and reports those that contain `needle`.
/// A process that exits meanwhile is reported `gone` (libstdc++'s ifstream would throw on the
/// ESRCH of its maps file, so it is read with read(2)).
inline MemoryScan scanMemory(pid_t pid, std::string_view needle) {
  MemoryScan r;
  std::string text;
  if (int fd = ::open(("/proc/" + std::to_string(pid) + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
      fd >= 0) {
    char chunk[65536];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) != 0;) {
      if (n < 0) {
        if (errno == EINTR) continue;
        r.gone = true;
        break;
      }
      text.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fd);
  } else {
    r.gone = true;
  }
  std::istringstream maps(text);
  int mem = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) r.gone = true;
  for (std::string line; mem >= 0 && std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[0] != 'r') continue;
    if (hi - lo > (1ul << 30) || line.find("[vvar]") != std::string::npos) continue;
    std::string buf(hi - lo, '\0');
    ssize_t n = ::pread(mem, buf.data(), buf.size(), static_cast<off_t>(lo));
    if (n <= 0) continue;
    buf.resize(static_cast<std::size_t>(n));
    r.scanned += buf.size();
    if (buf.find(needle) != std::string::npos) r.hits.push_back(line);
  }
  if (mem >= 0) ::close(mem);
  return r;
}

}  // namespace sluice::testing
