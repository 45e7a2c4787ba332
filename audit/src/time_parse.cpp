// --since/--until parsing (RFC 3339 or relative "7d") and RFC 3339 formatting.
#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <string>

#include "sluice/audit/reader.hpp"

namespace sluice::audit {
namespace {

bool digits(std::string_view s, std::size_t pos, std::size_t n, int& out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  return true;
}

Error bad(std::string_view text) {
  return Error{
      fmt::format("invalid time '{}': use RFC 3339 (2026-11-21T10:00:00Z) or a "
                  "relative form (90s, 15m, 1h, 7d, 2w)",
                  text)};
}

}  // namespace

std::expected<std::int64_t, Error> parseTime(std::string_view text, std::int64_t now_ms) {
  if (text.empty()) return std::unexpected(bad(text));
  // Relative: a count and a unit, meaning that long ago.
  {
    std::int64_t n = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
    if (ec == std::errc() && ptr != text.data() && n >= 0 && !unit.empty() &&
        unit.find_first_of("-:T") == std::string_view::npos) {
      std::int64_t ms = 0;
      if (unit == "ms")
        ms = 1;
      else if (unit == "s")
        ms = 1000;
      else if (unit == "m")
        ms = 60'000;
      else if (unit == "h")
        ms = 3'600'000;
      else if (unit == "d")
        ms = 86'400'000;
      else if (unit == "w")
        ms = 7 * 86'400'000LL;
      else
        return std::unexpected(bad(text));
      if (n > (INT64_MAX / ms)) return std::unexpected(bad(text));
      return now_ms - n * ms;
    }
  }
  // RFC 3339: YYYY-MM-DD[(T|t| )HH:MM[:SS[.fff]](Z|z|+HH:MM|-HH:MM)]
  std::tm tm{};
  int year, month, day;
  if (!digits(text, 0, 4, year) || text.size() < 10 || text[4] != '-' ||
      !digits(text, 5, 2, month) || text[7] != '-' || !digits(text, 8, 2, day)) {
    return std::unexpected(bad(text));
  }
  int hour = 0, minute = 0, second = 0, millis = 0, offset_min = 0;
  std::size_t pos = 10;
  if (pos < text.size()) {
    char sep = text[pos];
    if (sep != 'T' && sep != 't' && sep != ' ') return std::unexpected(bad(text));
    if (!digits(text, pos + 1, 2, hour) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !digits(text, pos + 4, 2, minute)) {
      return std::unexpected(bad(text));
    }
    pos += 6;
    if (pos < text.size() && text[pos] == ':') {
      if (!digits(text, pos + 1, 2, second)) return std::unexpected(bad(text));
      pos += 3;
      if (pos < text.size() && text[pos] == '.') {
        ++pos;
        int scale = 100, nd = 0;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
          millis += (text[pos] - '0') * scale;
          scale /= 10;
          ++pos;
          ++nd;
        }
        if (nd == 0) return std::unexpected(bad(text));
      }
    }
    if (pos >= text.size()) return std::unexpected(bad(text));  // RFC 3339 needs a zone
    char z = text[pos];
    if (z == 'Z' || z == 'z') {
      ++pos;
    } else if (z == '+' || z == '-') {
      int oh, om;
      if (!digits(text, pos + 1, 2, oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
          !digits(text, pos + 4, 2, om)) {
        return std::unexpected(bad(text));
      }
      offset_min = (oh * 60 + om) * (z == '-' ? -1 : 1);
      pos += 6;
    } else {
      return std::unexpected(bad(text));
    }
    if (pos != text.size()) return std::unexpected(bad(text));
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::unexpected(bad(text));
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  std::int64_t secs = timegm(&tm);  // UTC, unlike mktime
  return (secs - offset_min * 60LL) * 1000 + millis;
}

std::string formatTime(std::int64_t ms) {
  std::int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  int frac = static_cast<int>(ms - secs * 1000);
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

}  // namespace sluice::audit
