// `sluice gc`: removes cgroups left behind by a sluice that was SIGKILLed. Namespaces and
// mounts need no collection: they belong to the sandbox's init, which dies with sluice
// (PR_SET_PDEATHSIG) and takes its pid namespace and private mounts with it.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "proc_stat.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {

std::optional<std::uint64_t> processStartTime(pid_t pid) { return detail::ProcStat(pid).field(22); }

namespace {

namespace fs = std::filesystem;

// A cgroup is live when the process that made it still runs. Its name is
// "<pid>.<start time>.<execution id>": the start time (clock ticks since boot, /proc/PID/stat
// field 22) tells a live owner from an unrelated process that reused the pid. The answer is
// kept per owner ("<pid>.<start time>"): on v1 every execution has one directory per hierarchy.
class Owners {
 public:
  bool alive(std::string_view name) {
    const auto dot1 = name.find('.');
    if (dot1 == std::string::npos || dot1 == 0) return false;
    const auto dot2 = name.find('.', dot1 + 1);
    if (dot2 == std::string::npos) return false;
    const std::string_view owner = name.substr(0, dot2);
    for (const auto& [known, live] : seen_)
      if (known == owner) return live;
    const bool live = check(name.substr(0, dot1), name.substr(dot1 + 1, dot2 - dot1 - 1));
    seen_.emplace_back(std::string(owner), live);
    return live;
  }

 private:
  static bool check(std::string_view pid_text, std::string_view start) {
    pid_t pid = 0;
    for (char c : pid_text) {
      if (c < '0' || c > '9') return false;
      pid = pid * 10 + (c - '0');
    }
    if (pid == ::getpid()) return true;
    auto started = processStartTime(pid);
    return started && std::to_string(*started) == start;
  }

  std::vector<std::pair<std::string, bool>> seen_;
};

// The cgroups under `parent` whose owner is gone. A plain readdir: this runs at the start of
// every `sluice run`, where the directory holds the controllers' own files and live runs.
std::vector<fs::path> deadCgroups(const fs::path& parent, Owners& owners) {
  std::vector<fs::path> dead;
  DIR* dir = ::opendir(parent.c_str());
  if (dir == nullptr) return dead;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir =
          ::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir && !owners.alive(e->d_name)) dead.push_back(parent / e->d_name);
  }
  ::closedir(dir);
  return dead;
}

// Bounded: SIGKILL what is inside, then rmdir (retrying while the dead are reaped).
void collect(const fs::path& cgroup, GcReport& report) {
  for (int round = 0; round < 50; ++round) {
    auto pids = cgroupProcs(cgroup);
    if (pids.empty()) break;
    for (pid_t p : pids) {
      ::kill(p, SIGKILL);
      report.killed_pids.push_back(std::to_string(p));
    }
    ::usleep(10000);
  }
  bool removed = false;
  for (int i = 0; i < 50 && !removed; ++i) {
    removed = ::rmdir(cgroup.c_str()) == 0 || errno == ENOENT;
    if (!removed) ::usleep(10000);
  }
  if (removed)
    report.removed_cgroups.push_back(cgroup.string());
  else
    report.errors.push_back(cgroup.string() + ": " + std::strerror(errno));
}

}  // namespace

std::expected<GcReport, std::string> collectGarbage() {
  auto layout = detectCgroupLayout();
  if (!layout) return std::unexpected(layout.error());
  std::vector<fs::path> parents;
  if (layout->version == CgroupVersion::kV2)
    parents.push_back(layout->root / layout->parent);
  else
    for (const fs::path& h : {layout->memory_dir, layout->pids_dir, layout->cpuacct_dir})
      parents.push_back(h / layout->parent);
  GcReport report;
  Owners owners;
  for (const fs::path& parent : parents)
    for (const fs::path& cgroup : deadCgroups(parent, owners)) collect(cgroup, report);
  return report;
}

}  // namespace sluice::runner
