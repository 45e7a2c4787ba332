// `sluice gc`: removes cgroups left behind by a sluice that was SIGKILLed. Namespaces and
// mounts need no collection: they belong to the sandbox's init, which dies with sluice
// (PR_SET_PDEATHSIG) and takes its pid namespace and private mounts with it.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {

std::optional<std::uint64_t> processStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  try {
    return std::stoull(field);
  } catch (...) {
    return std::nullopt;
  }
}

namespace {

namespace fs = std::filesystem;

// A cgroup is live when the process that made it still runs. Its name is
// "<pid>.<start time>.<execution id>": the start time (clock ticks since boot, /proc/PID/stat
// field 22) tells a live owner from an unrelated process that reused the pid.
bool ownerAlive(const std::string& name) {
  const auto dot1 = name.find('.');
  if (dot1 == std::string::npos || dot1 == 0) return false;
  const auto dot2 = name.find('.', dot1 + 1);
  if (dot2 == std::string::npos) return false;
  pid_t pid = 0;
  for (size_t i = 0; i < dot1; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    pid = pid * 10 + (name[i] - '0');
  }
  if (pid == ::getpid()) return true;
  auto started = processStartTime(pid);
  return started && std::to_string(*started) == name.substr(dot1 + 1, dot2 - dot1 - 1);
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
  for (const fs::path& parent : parents) {
    std::error_code ec;
    if (!fs::is_directory(parent, ec)) continue;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
      if (!entry.is_directory(ec)) continue;
      const std::string name = entry.path().filename().string();
      if (ownerAlive(name)) continue;
      // Bounded: SIGKILL what is inside, then rmdir (retrying while the dead are reaped).
      for (int round = 0; round < 50; ++round) {
        auto pids = cgroupProcs(entry.path());
        if (pids.empty()) break;
        for (pid_t p : pids) {
          ::kill(p, SIGKILL);
          report.killed_pids.push_back(std::to_string(p));
        }
        ::usleep(10000);
      }
      bool removed = false;
      for (int i = 0; i < 50 && !removed; ++i) {
        removed = ::rmdir(entry.path().c_str()) == 0 || errno == ENOENT;
        if (!removed) ::usleep(10000);
      }
      if (removed)
        report.removed_cgroups.push_back(entry.path().string());
      else
        report.errors.push_back(entry.path().string() + ": " + std::strerror(errno));
    }
  }
  return report;
}

}  // namespace sluice::runner
