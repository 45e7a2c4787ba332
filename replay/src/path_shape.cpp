// Paths generalised where a segment varies like an identifier (learn.hpp pathShape).
#include <algorithm>
#include <cctype>

#include "sluice/replay/learn.hpp"

namespace sluice::replay {

namespace {

bool allOf(std::string_view s, int (*pred)(int)) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [&](char c) { return pred(static_cast<unsigned char>(c)); });
}

std::size_t countOf(std::string_view s, int (*pred)(int)) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)); }));
}

// 8-4-4-4-12 hex digits.
bool isUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// A token no person names: 16 or more of [A-Za-z0-9_-] with both letters and at least two
// digits (a slug like "getting-started-guide" has none).
bool isRandomToken(std::string_view s) {
  if (s.size() < 16) return false;
  const bool charset = std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
  return charset && countOf(s, isdigit) >= 2 && countOf(s, isalpha) > 0;
}

bool looksLikeId(std::string_view seg) {
  if (allOf(seg, isdigit)) return true;
  if (isUuid(seg)) return true;
  // A hex hash or id: at least 8 hex digits with a digit among them ("deadbeef" alone is a word).
  if (seg.size() >= 8 && allOf(seg, isxdigit) && countOf(seg, isdigit) > 0) return true;
  return isRandomToken(seg);
}

}  // namespace

std::string pathShape(std::string_view path) {
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      out += '/';
      ++i;
      continue;
    }
    const std::size_t end = std::min(path.find('/', i), path.size());
    std::string_view seg = path.substr(i, end - i);
    if (looksLikeId(seg)) {
      out += '*';
    } else {
      // A literal `*` or `?` would be a wildcard in a glob: `?` matches it (and one other).
      for (char c : seg) out += (c == '*' || c == '?') ? '?' : c;
    }
    i = end;
  }
  return out.empty() ? "/" : out;
}

}  // namespace sluice::replay
