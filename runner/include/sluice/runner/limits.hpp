// Command-line limit overrides: they may only tighten the workflow's sandbox limits.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {

struct LimitOverrides {
  std::optional<std::chrono::milliseconds> timeout, cpu_time;
  std::optional<std::uint64_t> memory, pids, output, disk, file_size, open_files;
};

/// Applies `o` to `base`. A value looser than the workflow's (greater, or 0 = unlimited where
/// the workflow has a limit) is an error naming the option: "--memory 1GiB is looser than the
/// workflow's 512MiB (overrides may only tighten)".
std::expected<Limits, std::string> applyOverrides(const Limits& base, const LimitOverrides& o);

/// "512MiB", "1GiB", "1000B" style rendering for messages and receipts.
std::string formatBytes(std::uint64_t bytes);
/// "30s", "1500ms" style rendering.
std::string formatMillis(std::chrono::milliseconds d);

}  // namespace sluice::runner
