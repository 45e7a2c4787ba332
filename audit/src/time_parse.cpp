// --since/--until parsing (RFC 3339 or relative "7d") and RFC 3339 formatting.
#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <optional>
#include <string>

#include "sluice/audit/reader.hpp"
#include "sluice/base/clock.hpp"

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

base::Error bad(std::string_view text) {
  return base::Error{base::Code::kInvalidArgument,
                     fmt::format("invalid time '{}': use RFC 3339 (2026-11-21T10:00:00Z) or a "
                                 "relative form (90s, 15m, 1h, 7d, 2w)",
                                 text)};
}

/// The relative form: a count and a unit, meaning that long before `now_ms`. nullopt when `text`
/// is not in that form (it may be RFC 3339); an error for a bad unit or an overflow.
std::optional<std::expected<std::int64_t, base::Error>> parseRelative(std::string_view text,
                                                                      std::int64_t now_ms) {
  std::int64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  if (ec != std::errc() || ptr == text.data() || n < 0 || unit.empty() ||
      unit.find_first_of("-:T") != std::string_view::npos) {
    return std::nullopt;
  }
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

/// The parts of an RFC 3339 time after the date.
struct Clock {
  int hour = 0, minute = 0, second = 0, millis = 0, offset_min = 0;
};

/// "(T|t| )HH:MM[:SS[.fff]]" at `pos`, advancing it; false when malformed.
bool parseTimeOfDay(std::string_view text, std::size_t& pos, Clock& c) {
  char sep = text[pos];
  if (sep != 'T' && sep != 't' && sep != ' ') return false;
  if (!digits(text, pos + 1, 2, c.hour) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
      !digits(text, pos + 4, 2, c.minute)) {
    return false;
  }
  pos += 6;
  if (pos >= text.size() || text[pos] != ':') return true;
  if (!digits(text, pos + 1, 2, c.second)) return false;
  pos += 3;
  if (pos >= text.size() || text[pos] != '.') return true;
  ++pos;
  int scale = 100, nd = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    c.millis += (text[pos] - '0') * scale;
    scale /= 10;
    ++pos;
    ++nd;
  }
  return nd > 0;
}

/// "Z|z|+HH:MM|-HH:MM" at `pos`, ending the text; false when malformed. RFC 3339 needs a zone.
bool parseZone(std::string_view text, std::size_t pos, Clock& c) {
  if (pos >= text.size()) return false;
  char z = text[pos];
  if (z == 'Z' || z == 'z') {
    ++pos;
  } else if (z == '+' || z == '-') {
    int oh, om;
    if (!digits(text, pos + 1, 2, oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !digits(text, pos + 4, 2, om)) {
      return false;
    }
    c.offset_min = (oh * 60 + om) * (z == '-' ? -1 : 1);
    pos += 6;
  } else {
    return false;
  }
  return pos == text.size();
}

/// RFC 3339: YYYY-MM-DD[(T|t| )HH:MM[:SS[.fff]](Z|z|+HH:MM|-HH:MM)]
std::expected<std::int64_t, base::Error> parseRfc3339(std::string_view text) {
  int year, month, day;
  if (!digits(text, 0, 4, year) || text.size() < 10 || text[4] != '-' ||
      !digits(text, 5, 2, month) || text[7] != '-' || !digits(text, 8, 2, day)) {
    return std::unexpected(bad(text));
  }
  Clock c;
  std::size_t pos = 10;
  if (pos < text.size() && (!parseTimeOfDay(text, pos, c) || !parseZone(text, pos, c)))
    return std::unexpected(bad(text));
  if (month < 1 || month > 12 || day < 1 || day > 31 || c.hour > 23 || c.minute > 59 ||
      c.second > 60) {
    return std::unexpected(bad(text));
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = c.hour;
  tm.tm_min = c.minute;
  tm.tm_sec = c.second;
  std::int64_t secs = timegm(&tm);  // UTC, unlike mktime
  return (secs - c.offset_min * 60LL) * 1000 + c.millis;
}

}  // namespace

std::expected<std::int64_t, base::Error> parseTime(std::string_view text, std::int64_t now_ms) {
  if (text.empty()) return std::unexpected(bad(text));
  if (auto relative = parseRelative(text, now_ms)) return *relative;
  return parseRfc3339(text);
}

std::string formatTime(std::int64_t ms) { return base::formatUtcMs(ms); }

}  // namespace sluice::audit
