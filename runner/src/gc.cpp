// `sluice gc`: removes cgroups left behind by a sluice that was SIGKILLed. Namespaces and
// mounts need no collection: they belong to the sandbox's init, which dies with sluice
// (PR_SET_PDEATHSIG) and takes its pid namespace and private mounts with it.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {
namespace {

namespace fs = std::filesystem;

// A cgroup is live when the sluice that made it (its name starts with "<pid>.") still runs.
bool ownerAlive(const std::string& name) {
  const auto dot = name.find('.');
  if (dot == std::string::npos || dot == 0) return false;
  pid_t pid = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    pid = pid * 10 + (name[i] - '0');
  }
  if (pid == ::getpid()) return true;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string c;
  return comm && std::getline(comm, c) && c.starts_with("sluice");
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
