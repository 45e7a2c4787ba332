// Durations and byte sizes as people write them in policy files and on the command line.
#include "sluice/policy/units.hpp"

#include <cctype>
#include <limits>
#include <utility>

namespace sluice::policy {
namespace {

bool parseNumber(std::string_view s, std::size_t& i, std::uint64_t& value) {
  std::size_t start = i;
  value = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    std::uint64_t digit = static_cast<std::uint64_t>(s[i] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return false;
    value = value * 10 + digit;
    ++i;
  }
  return i > start;
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

std::expected<std::chrono::milliseconds, std::string> parseDuration(std::string_view text) {
  if (text.empty()) return std::unexpected("empty duration (expected e.g. 30s, 2m, 1h)");
  std::size_t i = 0;
  std::uint64_t total_ms = 0;
  bool any = false;
  while (i < text.size()) {
    std::uint64_t n = 0;
    if (!parseNumber(text, i, n)) {
      return std::unexpected("bad duration " + quoted(text) + " (expected e.g. 30s, 2m, 1h)");
    }
    std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    std::uint64_t mult = 0;
    if (unit.empty()) {
      if (any || i != text.size()) {
        return std::unexpected("bad duration " + quoted(text) + ": missing unit");
      }
      mult = 1000;  // a bare number is seconds
    } else if (unit == "ms") {
      mult = 1;
    } else if (unit == "s") {
      mult = 1000;
    } else if (unit == "m") {
      mult = 60'000;
    } else if (unit == "h") {
      mult = 3'600'000;
    } else if (unit == "d") {
      mult = 86'400'000;
    } else {
      return std::unexpected("bad duration " + quoted(text) + ": unknown unit " + quoted(unit) +
                             " (use ms, s, m, h or d)");
    }
    if (n > std::numeric_limits<std::uint64_t>::max() / mult / 2) {
      return std::unexpected("duration " + quoted(text) + " is too large");
    }
    total_ms += n * mult;
    any = true;
  }
  if (total_ms > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / 2)) {
    return std::unexpected("duration " + quoted(text) + " is too large");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(total_ms));
}

std::expected<std::uint64_t, std::string> parseSize(std::string_view text) {
  if (text.empty()) return std::unexpected("empty size (expected e.g. 512MiB, 1GB)");
  std::size_t i = 0;
  std::uint64_t n = 0;
  if (!parseNumber(text, i, n)) {
    return std::unexpected("bad size " + quoted(text) + " (expected e.g. 512MiB, 1GB)");
  }
  std::string_view unit = text.substr(i);
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"K", 1000},
      {"KB", 1000},
      {"KiB", 1ull << 10},
      {"M", 1000'000},
      {"MB", 1000'000},
      {"MiB", 1ull << 20},
      {"G", 1000'000'000},
      {"GB", 1000'000'000},
      {"GiB", 1ull << 30},
      {"T", 1000'000'000'000},
      {"TB", 1000'000'000'000},
      {"TiB", 1ull << 40},
  };
  for (const auto& [name, mult] : kUnits) {
    if (unit == name) {
      if (n > std::numeric_limits<std::uint64_t>::max() / mult) {
        return std::unexpected("size " + quoted(text) + " is too large");
      }
      return n * mult;
    }
  }
  return std::unexpected("bad size " + quoted(text) + ": unknown unit " + quoted(unit) +
                         " (use B, KB, KiB, MB, MiB, GB, GiB, TB or TiB)");
}

std::string formatDuration(std::chrono::milliseconds d) {
  std::int64_t ms = d.count();
  if (ms == 0) return "0s";
  if (ms % 1000 != 0) return std::to_string(ms) + "ms";
  std::int64_t s = ms / 1000;
  std::string out;
  if (s >= 3600) {
    out += std::to_string(s / 3600) + "h";
    s %= 3600;
  }
  if (s >= 60) {
    out += std::to_string(s / 60) + "m";
    s %= 60;
  }
  if (s > 0) out += std::to_string(s) + "s";
  return out;
}

std::string formatSize(std::uint64_t bytes) {
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}};
  for (const auto& [name, mult] : kUnits) {
    if (bytes >= mult && bytes % mult == 0) return std::to_string(bytes / mult) + std::string(name);
  }
  return std::to_string(bytes) + "B";
}

}  // namespace sluice::policy
