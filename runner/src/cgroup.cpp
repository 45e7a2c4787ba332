// Cgroup v1/v2 creation, limits, counters and removal for one execution (see cgroup.hpp).
#include "sluice/runner/cgroup.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <mutex>
#include <span>
#include <sstream>
#include <thread>

namespace sluice::runner {
namespace {

namespace fs = std::filesystem;

bool isFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Writes `value` with a single write(2): cgroupfs parses each write as one command, and a
// buffered stream could split or merge them.
std::expected<void, std::string> writeFile(const fs::path& file, std::string_view value) {
  // O_CREAT only matters for a fake cgroupfs in tests; kernfs files always exist.
  int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_TRUNC | O_CREAT, 0644);
  if (fd < 0) return std::unexpected(file.string() + ": " + std::strerror(errno));
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n < 0) return std::unexpected(file.string() + ": " + std::strerror(err));
  return {};
}

// A counter's text: the value on the line starting with `key` ("key value" lines), or without
// a key the first word ("max": UINT64_MAX). Anything else is no value.
std::optional<std::uint64_t> parseCounter(std::string_view text, const char* key) {
  while (key) {
    const std::string_view k(key);
    if (text.starts_with(k) && text.size() > k.size() && text[k.size()] == ' ') {
      text.remove_prefix(k.size() + 1);
      break;
    }
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    text.remove_prefix(nl + 1);
  }
  if (!key && text.starts_with("max")) return UINT64_MAX;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return v;
}

// One counter of CgroupStats: the file (in dirs_[dir]), its key ("key value" files) and the
// unit it is kept in (cpuacct.usage counts nanoseconds, the stats microseconds).
struct CounterFile {
  std::size_t dir;
  const char* name;
  const char* key;
  std::uint64_t CgroupStats::*field;
  std::uint64_t divisor = 1;
};

constexpr std::array<CounterFile, 6> kV2Counters{{
    {0, "memory.events", "oom_kill", &CgroupStats::oom_kills},
    {0, "pids.events", "max", &CgroupStats::pids_max_events},
    {0, "cpu.stat", "usage_usec", &CgroupStats::cpu_usage_us},
    {0, "memory.peak", nullptr, &CgroupStats::memory_peak},
    {0, "pids.current", nullptr, &CgroupStats::pids_current},
    {0, "pids.peak", nullptr, &CgroupStats::pids_peak},
}};
constexpr std::array<CounterFile, 7> kV1Counters{{
    {0, "memory.oom_control", "oom_kill", &CgroupStats::oom_kills},
    {0, "memory.max_usage_in_bytes", nullptr, &CgroupStats::memory_peak},
    {0, "memory.failcnt", nullptr, &CgroupStats::memory_failcnt},
    {1, "pids.events", "max", &CgroupStats::pids_max_events},
    {1, "pids.current", nullptr, &CgroupStats::pids_current},
    {1, "pids.peak", nullptr, &CgroupStats::pids_peak},
    {2, "cpuacct.usage", nullptr, &CgroupStats::cpu_usage_us, 1000},
}};

std::span<const CounterFile> countersOf(CgroupVersion v) {
  if (v == CgroupVersion::kV2) return kV2Counters;
  return kV1Counters;
}

base::Error cgError(std::string step, std::string message) {
  return base::Error{base::Code::kIo, std::move(message), "cgroup " + std::move(step)};
}

// Creates `dir` (and its parent) if missing. v1 hierarchies and the v2 parent are shared by
// every execution, so EEXIST is normal.
std::expected<void, std::string> makeDir(const fs::path& dir) {
  if (::mkdir(dir.parent_path().c_str(), 0755) != 0 && errno != EEXIST)
    return std::unexpected(dir.parent_path().string() + ": " + std::strerror(errno));
  if (::mkdir(dir.c_str(), 0755) != 0)
    return std::unexpected(dir.string() + ": " + std::strerror(errno));
  return {};
}

// v2 only delegates a controller to children when the parent lists it in subtree_control;
// enable what we need at <root> and <root>/<parent>. Already-enabled is a no-op write.
std::expected<void, std::string> enableV2Controllers(const fs::path& dir) {
  std::ifstream in(dir / "cgroup.controllers");
  std::string avail((std::istreambuf_iterator<char>(in)), {});
  std::string want;
  for (const char* c : {"memory", "pids", "cpu"}) {
    std::istringstream words(avail);
    std::string w;
    while (words >> w)
      if (w == c) want += std::string(want.empty() ? "" : " ") + "+" + c;
  }
  if (want.empty()) return {};
  return writeFile(dir / "cgroup.subtree_control", want);
}

}  // namespace

std::expected<CgroupLayout, std::string> detectCgroupLayout(const fs::path& root) {
  CgroupLayout layout;
  layout.root = root;
  if (isFile(root / "cgroup.controllers")) {
    std::ifstream in(root / "cgroup.controllers");
    std::string avail((std::istreambuf_iterator<char>(in)), {});
    if (avail.find("memory") != std::string::npos && avail.find("pids") != std::string::npos) {
      layout.version = CgroupVersion::kV2;
      return layout;
    }
    return std::unexpected(root.string() +
                           ": cgroup v2 without the memory and pids controllers available");
  }
  layout.version = CgroupVersion::kV1;
  // Controllers may be co-mounted ("cpu,cpuacct"); take the first directory that has the
  // controller's own file.
  auto find = [&](std::initializer_list<const char*> names, const char* probe) -> fs::path {
    for (const char* n : names)
      if (isFile(root / n / probe)) return root / n;
    return {};
  };
  layout.memory_dir = find({"memory"}, "memory.limit_in_bytes");
  layout.pids_dir = find({"pids"}, "cgroup.procs");
  layout.cpuacct_dir = find({"cpuacct", "cpu,cpuacct", "cpuacct,cpu"}, "cpuacct.usage");
  if (layout.memory_dir.empty() || layout.pids_dir.empty() || layout.cpuacct_dir.empty())
    return std::unexpected(root.string() +
                           ": no usable cgroup hierarchy (need v2 with memory+pids, or v1 "
                           "memory, pids and cpuacct)");
  return layout;
}

// The counter files of one cgroup, kept open: a session reads them after every exec, and a
// pread of an open cgroupfs file (the kernel formats it afresh at offset 0) costs a fraction
// of a path walk, open, read and close per file.
struct Cgroup::CounterFiles {
  std::once_flag opened;
  std::array<int, kV1Counters.size()> fds;
  CounterFiles() { fds.fill(-1); }
  ~CounterFiles() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  CounterFiles(const CounterFiles&) = delete;
  CounterFiles& operator=(const CounterFiles&) = delete;
};

base::Result<Cgroup> Cgroup::create(const CgroupLayout& layout, std::string_view name,
                                    const Limits& limits) {
  Cgroup cg;
  cg.version_ = layout.version;
  cg.removed_ = false;
  cg.counters_ = std::make_unique<CounterFiles>();
  auto fail = [&](std::string step, std::string msg) -> std::unexpected<base::Error> {
    (void)cg.remove();
    return std::unexpected(cgError(std::move(step), std::move(msg)));
  };
  // cgroup memory limits are bytes; 0 ("unlimited" in Limits) maps to the kernel's "max".
  const std::string mem = limits.memory ? std::to_string(limits.memory) : "max";
  const std::string pids = limits.pids ? std::to_string(limits.pids) : "max";

  if (layout.version == CgroupVersion::kV2) {
    const fs::path parent = layout.root / layout.parent;
    if (auto r = enableV2Controllers(layout.root); !r) return fail("enable controllers", r.error());
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST)
      return fail("mkdir", parent.string() + ": " + std::strerror(errno));
    if (auto r = enableV2Controllers(parent); !r) return fail("enable controllers", r.error());
    const fs::path dir = parent / std::string(name);
    if (::mkdir(dir.c_str(), 0755) != 0)
      return fail("mkdir", dir.string() + ": " + std::strerror(errno));
    cg.dirs_.push_back(dir);
    if (auto r = writeFile(dir / "memory.max", mem); !r) return fail("memory.max", r.error());
    // "Swap included": no swap at all for the sandbox, so memory.max is the whole budget.
    // Without swap support the file is absent (and there is no swap to limit).
    if (auto r = writeFile(dir / "memory.swap.max", "0"); !r && isFile(dir / "memory.swap.max"))
      return fail("memory.swap.max", r.error());
    // Kill the whole group on OOM rather than one process, so a limit hit is unambiguous.
    (void)writeFile(dir / "memory.oom.group", "1");
    if (auto r = writeFile(dir / "pids.max", pids); !r) return fail("pids.max", r.error());
    return cg;
  }

  for (const fs::path& h : {layout.memory_dir, layout.pids_dir, layout.cpuacct_dir}) {
    const fs::path dir = h / layout.parent / std::string(name);
    if (auto r = makeDir(dir); !r) return fail("mkdir", r.error());
    cg.dirs_.push_back(dir);
  }
  const fs::path& m = cg.dirs_[0];
  if (auto r = writeFile(m / "memory.limit_in_bytes", limits.memory ? mem : "-1"); !r)
    return fail("memory.limit_in_bytes", r.error());
  // memsw = memory + swap; equal to the memory limit means no swap. Only present when the
  // kernel does swap accounting. Must be written after limit_in_bytes (memsw >= memory).
  if (auto r = writeFile(m / "memory.memsw.limit_in_bytes", limits.memory ? mem : "-1");
      !r && isFile(m / "memory.memsw.limit_in_bytes"))
    return fail("memory.memsw.limit_in_bytes", r.error());
  if (auto r = writeFile(cg.dirs_[1] / "pids.max", pids); !r) return fail("pids.max", r.error());
  return cg;
}

Cgroup::Cgroup(Cgroup&& other) noexcept
    : version_(other.version_),
      dirs_(std::move(other.dirs_)),
      removed_(other.removed_),
      counters_(std::move(other.counters_)) {
  other.removed_ = true;
  other.dirs_.clear();
}

Cgroup& Cgroup::operator=(Cgroup&& other) noexcept {
  if (this != &other) {
    (void)remove();
    version_ = other.version_;
    dirs_ = std::move(other.dirs_);
    removed_ = other.removed_;
    counters_ = std::move(other.counters_);
    other.removed_ = true;
    other.dirs_.clear();
  }
  return *this;
}

Cgroup::~Cgroup() { (void)remove(); }

base::Result<void> Cgroup::addProcess(pid_t pid) const {
  const std::string text = std::to_string(pid);
  for (const fs::path& d : dirs_)
    if (auto r = writeFile(d / "cgroup.procs", text); !r)
      return std::unexpected(cgError("cgroup.procs", r.error()));
  return {};
}

CgroupStats Cgroup::stats() const {
  CgroupStats s;
  if (dirs_.empty() || !counters_) return s;
  const auto files = countersOf(version_);
  std::call_once(counters_->opened, [&] {
    for (std::size_t i = 0; i < files.size(); ++i)
      if (files[i].dir < dirs_.size())
        counters_->fds[i] =
            ::open((dirs_[files[i].dir] / files[i].name).c_str(), O_RDONLY | O_CLOEXEC);
  });
  char buf[4096];
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (counters_->fds[i] < 0) continue;
    const ssize_t n = ::pread(counters_->fds[i], buf, sizeof buf, 0);
    if (n <= 0) continue;
    if (auto v = parseCounter({buf, static_cast<std::size_t>(n)}, files[i].key))
      s.*files[i].field = *v / files[i].divisor;
  }
  return s;
}

void Cgroup::killAll() const {
  if (dirs_.empty()) return;
  const fs::path procs_dir = version_ == CgroupVersion::kV2 ? dirs_[0] : dirs_[1];
  // cgroup.kill (v2, Linux 5.14+) kills atomically, racing no fork.
  if (version_ == CgroupVersion::kV2 && isFile(procs_dir / "cgroup.kill"))
    (void)writeFile(procs_dir / "cgroup.kill", "1");
  // Otherwise (v1): SIGKILL what is listed until nothing is; pids.max bounds the forks racing
  // us, and the bound on rounds keeps teardown finite.
  for (int round = 0; round < 100; ++round) {
    auto pids = cgroupProcs(procs_dir);
    if (pids.empty()) return;
    for (pid_t p : pids) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 10 ? 1 : 10));
  }
}

std::expected<void, std::string> Cgroup::remove() {
  counters_.reset();
  if (removed_) return {};
  std::string errors;
  for (const fs::path& d : dirs_) {
    // rmdir fails with EBUSY while a (dying) process is still charged; kill and retry briefly.
    bool ok = false;
    for (int i = 0; i < 200; ++i) {
      if (::rmdir(d.c_str()) == 0 || errno == ENOENT) {
        ok = true;
        break;
      }
      if (errno != EBUSY) break;
      for (pid_t p : cgroupProcs(d)) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!ok) errors += (errors.empty() ? "" : "; ") + d.string() + ": " + std::strerror(errno);
  }
  removed_ = true;
  dirs_.clear();
  if (!errors.empty()) return std::unexpected(errors);
  return {};
}

std::string cgroupName(std::string_view execution_id) {
  static const std::string prefix = [] {
    const pid_t self = ::getpid();
    return std::to_string(self) + "." + std::to_string(processStartTime(self).value_or(0)) + ".";
  }();
  return prefix + std::string(execution_id);
}

std::vector<pid_t> cgroupProcs(const fs::path& dir) {
  std::vector<pid_t> out;
  std::ifstream in(dir / "cgroup.procs");
  long p = 0;
  while (in >> p) out.push_back(static_cast<pid_t>(p));
  return out;
}

std::optional<std::uint64_t> readKeyedCounter(const fs::path& file, std::string_view key) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string k;
    std::uint64_t v = 0;
    if (words >> k >> v && k == key) return v;
  }
  return std::nullopt;
}

}  // namespace sluice::runner
