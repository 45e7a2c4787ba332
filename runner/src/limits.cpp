// Limit overrides that may only tighten (see limits.hpp).
#include "sluice/runner/limits.hpp"

namespace sluice::runner {
namespace {

// 0 means "no limit": the loosest value of all.
bool looser(std::uint64_t v, std::uint64_t base) {
  if (base == 0) return false;
  return v == 0 || v > base;
}

}  // namespace

std::string formatBytes(std::uint64_t b) {
  if (b == 0) return "unlimited";
  const char* units[] = {"TiB", "GiB", "MiB", "KiB"};
  const int shifts[] = {40, 30, 20, 10};
  for (int i = 0; i < 4; ++i)
    if (b % (1ull << shifts[i]) == 0) return std::to_string(b >> shifts[i]) + units[i];
  return std::to_string(b) + "B";
}

std::string formatMillis(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms == 0) return "unlimited";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::expected<Limits, std::string> applyOverrides(const Limits& base, const LimitOverrides& o) {
  Limits out = base;
  auto tooLoose = [](const char* opt, const std::string& v, const std::string& b) {
    return std::unexpected(std::string("--") + opt + " " + v + " is looser than the workflow's " +
                           b + " (overrides may only tighten)");
  };
  auto dur = [&](const char* opt, const std::optional<std::chrono::milliseconds>& v,
                 std::chrono::milliseconds base_v,
                 std::chrono::milliseconds& dst) -> std::expected<void, std::string> {
    if (!v) return {};
    if (looser(static_cast<std::uint64_t>(v->count()), static_cast<std::uint64_t>(base_v.count())))
      return tooLoose(opt, formatMillis(*v), formatMillis(base_v));
    dst = *v;
    return {};
  };
  auto num = [&](const char* opt, const std::optional<std::uint64_t>& v, std::uint64_t base_v,
                 std::uint64_t& dst, bool bytes) -> std::expected<void, std::string> {
    if (!v) return {};
    if (looser(*v, base_v))
      return tooLoose(opt, bytes ? formatBytes(*v) : (*v ? std::to_string(*v) : "unlimited"),
                      bytes ? formatBytes(base_v) : std::to_string(base_v));
    dst = *v;
    return {};
  };
  if (auto r = dur("timeout", o.timeout, base.timeout, out.timeout); !r)
    return std::unexpected(r.error());
  if (auto r = dur("cpu-time", o.cpu_time, base.cpu_time, out.cpu_time); !r)
    return std::unexpected(r.error());
  if (auto r = num("memory", o.memory, base.memory, out.memory, true); !r)
    return std::unexpected(r.error());
  if (auto r = num("pids", o.pids, base.pids, out.pids, false); !r)
    return std::unexpected(r.error());
  if (auto r = num("output", o.output, base.output, out.output, true); !r)
    return std::unexpected(r.error());
  if (auto r = num("disk", o.disk, base.disk, out.disk, true); !r)
    return std::unexpected(r.error());
  // file_size 0 means "same as disk", which a non-zero override always tightens or equals.
  const std::uint64_t base_fs = base.file_size ? base.file_size : base.disk;
  if (auto r = num("file-size", o.file_size, base_fs, out.file_size, true); !r)
    return std::unexpected(r.error());
  if (auto r = num("open-files", o.open_files, base.open_files, out.open_files, false); !r)
    return std::unexpected(r.error());
  return out;
}

}  // namespace sluice::runner
