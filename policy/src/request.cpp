// Canonical requests (see request.hpp): method check and RFC 3986 path normalisation.
#include "sluice/policy/request.hpp"

#include <vector>

namespace sluice::policy {
namespace {

constexpr std::size_t kMaxMethod = 64;

bool isTokenChar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) return true;
  switch (c) {
    // clang-format off
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    // clang-format on
    default:
      return false;
  }
}

// RFC 3986 2.3: ALPHA / DIGIT / "-" / "." / "_" / "~"
bool isUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 200)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

std::unexpected<RequestProblem> problem(Reason r, std::string detail) {
  return std::unexpected(RequestProblem{r, std::move(detail)});
}

// Raw bytes: no control bytes, no non-ASCII, no backslash.
std::expected<void, RequestProblem> checkRawBytes(std::string_view part, std::string_view what,
                                                  std::string_view target) {
  for (char c : part) {
    auto u = static_cast<unsigned char>(c);
    if (u == 0 || u < 0x20 || u == 0x7F)
      return problem(Reason::kAmbiguousTarget, "control byte in the request " + std::string(what) +
                                                   " '" + shown(target) + "'");
    if (u >= 0x80)
      return problem(Reason::kInvalidTarget, "non-ASCII byte in the request " + std::string(what) +
                                                 " '" + shown(target) + "' (percent-encode it)");
    if (c == '\\')
      return problem(Reason::kAmbiguousTarget,
                     "backslash in the request " + std::string(what) + " '" + shown(target) +
                         "' (servers disagree on whether it separates segments)");
    if (c == ' ')
      return problem(Reason::kInvalidTarget,
                     "space in the request " + std::string(what) + " '" + shown(target) + "'");
  }
  return {};
}

// The number of continuation bytes a UTF-8 lead byte announces; -1 when it cannot lead.
int utf8Continuations(unsigned char lead) {
  if (lead >= 0xC0 && lead <= 0xDF) return 1;  // C0 and C1 lead only overlong forms
  if (lead >= 0xE0 && lead <= 0xEF) return 2;
  if (lead >= 0xF0 && lead <= 0xF7) return 3;  // F5..F7 are past U+10FFFF
  return -1;
}

// Checks the percent-escaped UTF-8 sequence at seg[i] (an escape of a byte >= 0x80) and appends
// it to `out` in upper-case hex; returns the index after it. A decoder that is lax about UTF-8
// reads an overlong form as the ASCII byte it encodes (%C0%AE is '.', %C0%AF is '/'), and one
// that maps invalid bytes to U+FFFD or a code page reads them as something else again: both
// are ambiguous, and so are the C1 control characters (U+0080..U+009F).
std::expected<std::size_t, RequestProblem> utf8Escapes(std::string_view seg, std::size_t i,
                                                       std::string_view target, std::string& out) {
  auto byteAt = [&](std::size_t at) -> int {
    if (at + 2 >= seg.size() || seg[at] != '%') return -1;
    const int hi = hexValue(seg[at + 1]), lo = hexValue(seg[at + 2]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  };
  auto bad = [&](std::string what) {
    return problem(Reason::kAmbiguousTarget, what + " in the request path '" + shown(target) +
                                                 "' (decoders disagree on what it means)");
  };
  const auto lead = static_cast<unsigned char>(byteAt(i));
  const int n = utf8Continuations(lead);
  if (n < 0) return bad("percent-escape of an invalid UTF-8 byte");
  std::uint32_t cp = lead & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    const int b = byteAt(i + 3 * k);
    if (b < 0x80 || b > 0xBF) return bad("percent-escaped UTF-8 sequence that is cut short");
    cp = (cp << 6) | static_cast<std::uint32_t>(b & 0x3F);
  }
  static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n])
    return bad("overlong UTF-8 encoding " + std::string(seg.substr(i, 3 * (n + 1))));
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return bad("percent-escaped UTF-8 of an invalid code point");
  if (cp <= 0x9F) return bad("percent-escaped control character (U+0080..U+009F)");
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int k = 0; k <= n; ++k) {
    const auto v = static_cast<unsigned char>(byteAt(i + 3 * k));
    out += '%';
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return i + 3 * static_cast<std::size_t>(n + 1);
}

// Decodes the escapes of unreserved characters in one segment and upper-cases the hex of the
// others. Refuses escapes whose decoding would change the path's structure or hide a byte.
std::expected<std::string, RequestProblem> normaliseSegment(std::string_view seg,
                                                            std::string_view target) {
  std::string out;
  out.reserve(seg.size());
  for (std::size_t i = 0; i < seg.size();) {
    if (seg[i] != '%') {
      out += seg[i++];
      continue;
    }
    const int hi = i + 1 < seg.size() ? hexValue(seg[i + 1]) : -1;
    const int lo = i + 2 < seg.size() ? hexValue(seg[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      return problem(Reason::kInvalidTarget,
                     "bad percent escape in the request path '" + shown(target) + "'");
    auto v = static_cast<unsigned char>(hi * 16 + lo);
    if (v == '/' || v == '\\')
      return problem(Reason::kAmbiguousTarget,
                     std::string("encoded '") + static_cast<char>(v) + "' in the request path '" +
                         shown(target) + "' (servers disagree on whether it separates segments)");
    if (v < 0x20 || v == 0x7F)
      return problem(Reason::kAmbiguousTarget,
                     "encoded control byte in the request path '" + shown(target) + "'");
    if (v >= 0x80) {
      auto next = utf8Escapes(seg, i, target, out);
      if (!next) return std::unexpected(next.error());
      i = *next;
      continue;
    }
    if (isUnreserved(v)) {
      out += static_cast<char>(v);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[v >> 4];
      out += kHex[v & 15];
    }
    i += 3;
  }
  return out;
}

bool isDotSegment(std::string_view s) { return s == "." || s == ".."; }

// Windows and IIS drop a segment's trailing dots and spaces (`admin.` and `admin%20` open
// `admin`), and `...` is a dot segment to some of them: either would slip past a rule on `admin`.
bool endsInDotOrSpace(std::string_view s) { return s.ends_with('.') || s.ends_with("%20"); }

// The checks on one normalised segment `seg` (spelled `raw`) that need its decoded form.
std::expected<void, RequestProblem> checkSegment(std::string_view raw, std::string_view seg,
                                                 std::string_view target) {
  auto ambiguous = [&](std::string what, std::string why) {
    return problem(Reason::kAmbiguousTarget, what + " '" + shown(raw) + "' in the request path '" +
                                                 shown(target) + "' (" + why + ")");
  };
  if (isDotSegment(seg) && !isDotSegment(raw))
    return ambiguous("encoded dot segment", "servers disagree on whether it is one");
  if (isDotSegment(seg)) return {};
  const auto semi = seg.find(';');
  const std::string_view name = seg.substr(0, semi);
  if (semi != std::string_view::npos && isDotSegment(name))
    return ambiguous("dot segment with parameters", "some servers read it as '..'");
  if (!name.empty() && name.find_first_not_of('.') == std::string_view::npos)
    return ambiguous("segment of dots", "some servers read it as '..'");
  if (endsInDotOrSpace(name) || endsInDotOrSpace(seg))
    return ambiguous("segment ending in '.' or a space",
                     "Windows and IIS servers drop them: 'admin.' and 'admin%20' open 'admin'");
  return {};
}

// "/" and the segments joined by '/', then a trailing '/' when asked (and there are segments).
template <typename Segments>
std::string joinPath(const Segments& segs, bool trailing_slash) {
  std::string out = "/";
  for (std::size_t i = 0; i < segs.size(); ++i) {
    if (i) out += '/';
    out += segs[i];
  }
  if (trailing_slash && !segs.empty()) out += '/';
  return out;
}

// Splits the path into segments, normalises and checks each, removes dot segments (RFC 3986
// 5.2.4; `..` never climbs above the root), and sets req.path, and req.bare_path when a segment
// carries ';' parameters (servlet containers route `/a;x/b` to `/a/b`).
std::expected<void, RequestProblem> canonicalPath(std::string_view path, std::string_view target,
                                                  HttpRequest& req) {
  std::vector<std::string> out;
  bool trailing_slash = false;
  std::string_view rest = path.substr(1);
  while (true) {
    auto slash = rest.find('/');
    std::string_view raw = rest.substr(0, slash);
    auto seg = normaliseSegment(raw, target);
    if (!seg) return std::unexpected(seg.error());
    if (auto ok = checkSegment(raw, *seg, target); !ok) return std::unexpected(ok.error());
    if (*seg == "..") {
      if (!out.empty()) out.pop_back();
      trailing_slash = true;
    } else if (*seg == "." || seg->empty()) {
      trailing_slash = true;  // "a/." and "a/" both end in a directory; "a//b" drops the gap
    } else {
      out.push_back(std::move(*seg));
      trailing_slash = false;
    }
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  req.path = joinPath(out, trailing_slash);
  if (req.path.find(';') == std::string::npos) return {};
  // The same path with every segment's parameters cut off; a segment of parameters only is
  // empty, and dropped like any empty segment.
  std::vector<std::string_view> bare;
  for (std::string_view seg : out)
    if (auto name = seg.substr(0, seg.find(';')); !name.empty()) bare.push_back(name);
  const bool last_empty = !out.empty() && out.back().front() == ';';
  req.bare_path = joinPath(bare, trailing_slash || last_empty);
  return {};
}

}  // namespace

std::expected<std::string, RequestProblem> canonicalMethod(std::string_view method) {
  if (method.empty()) return problem(Reason::kInvalidMethod, "empty request method");
  if (method.size() > kMaxMethod)
    return problem(Reason::kInvalidMethod,
                   "request method longer than " + std::to_string(kMaxMethod) + " characters");
  for (char c : method) {
    auto u = static_cast<unsigned char>(c);
    if (!isTokenChar(u))
      return problem(Reason::kInvalidMethod,
                     "request method '" + shown(method) + "' is not an HTTP token");
    if (u >= 'a' && u <= 'z')
      return problem(Reason::kInvalidMethod,
                     "request method '" + shown(method) +
                         "' is not upper-case (methods are case-sensitive; write it as the "
                         "upstream defines it, e.g. GET, DELETE)");
  }
  return std::string(method);
}

std::expected<HttpRequest, RequestProblem> canonicalRequest(std::string_view method,
                                                            std::string_view origin_target) {
  HttpRequest req;
  auto m = canonicalMethod(method);
  if (!m) return std::unexpected(m.error());
  req.method = std::move(*m);
  if (origin_target.empty() || origin_target.front() != '/')
    return problem(Reason::kInvalidTarget,
                   "request target '" + shown(origin_target) + "' does not start with '/'");
  if (origin_target.find('#') != std::string_view::npos)
    return problem(Reason::kInvalidTarget,
                   "request target '" + shown(origin_target) + "' carries a fragment ('#')");
  auto q = origin_target.find('?');
  std::string_view path = origin_target.substr(0, q);
  std::string_view query =
      q == std::string_view::npos ? std::string_view() : origin_target.substr(q + 1);
  if (auto ok = checkRawBytes(path, "path", origin_target); !ok) return std::unexpected(ok.error());
  if (auto ok = checkRawBytes(query, "query", origin_target); !ok)
    return std::unexpected(ok.error());
  // The query is not judged by rules, but its escapes must be well-formed.
  for (std::size_t i = 0; i < query.size(); ++i) {
    if (query[i] != '%') continue;
    if (i + 2 >= query.size() || hexValue(query[i + 1]) < 0 || hexValue(query[i + 2]) < 0)
      return problem(Reason::kInvalidTarget,
                     "bad percent escape in the request query '" + shown(origin_target) + "'");
  }
  req.query = std::string(query);

  if (auto path_ok = canonicalPath(path, origin_target, req); !path_ok)
    return std::unexpected(path_ok.error());
  return req;
}

}  // namespace sluice::policy
