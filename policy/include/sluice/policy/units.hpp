// Human units in policy files and on the command line: durations and byte sizes.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace sluice::policy {

/// Parses `500ms`, `30s`, `2m`, `1h`, `1h30m`; a bare number is seconds. Error text says why.
std::expected<std::chrono::milliseconds, std::string> parseDuration(std::string_view text);

/// Parses `512MiB`, `1GB`, `64KiB`, `100` (bytes); units B, K/KB, KiB, M/MB, MiB, G/GB, GiB, T/TB,
/// TiB.
std::expected<std::uint64_t, std::string> parseSize(std::string_view text);

/// Formats a duration as the shortest exact form (`30s`, `1m30s`, `250ms`).
std::string formatDuration(std::chrono::milliseconds d);

/// Formats a byte count with a binary unit when exact (`512MiB`), else bytes.
std::string formatSize(std::uint64_t bytes);

}  // namespace sluice::policy
