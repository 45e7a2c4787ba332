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
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
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
      return problem(Reason::kAmbiguousTarget,
                     "control byte in the request " + std::string(what) + " '" + shown(target) +
                         "'");
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

// Decodes the escapes of unreserved characters in one segment and upper-cases the hex of the
// others. Refuses escapes whose decoding would change the path's structure or hide a byte.
std::expected<std::string, RequestProblem> normaliseSegment(std::string_view seg,
                                                            std::string_view target) {
  std::string out;
  out.reserve(seg.size());
  for (std::size_t i = 0; i < seg.size(); ++i) {
    if (seg[i] != '%') {
      out += seg[i];
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
    if (isUnreserved(v)) {
      out += static_cast<char>(v);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[v >> 4];
      out += kHex[v & 15];
    }
    i += 2;
  }
  return out;
}

bool isDotSegment(std::string_view s) { return s == "." || s == ".."; }

}  // namespace

std::expected<std::string, RequestProblem> canonicalMethod(std::string_view method) {
  if (method.empty()) return problem(Reason::kInvalidMethod, "empty request method");
  if (method.size() > kMaxMethod)
    return problem(Reason::kInvalidMethod, "request method longer than " +
                                               std::to_string(kMaxMethod) + " characters");
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

  // Split into segments (after the leading '/'), normalise each, then remove dot segments.
  std::vector<std::string> out;
  bool trailing_slash = false;
  std::string_view rest = path.substr(1);
  while (true) {
    auto slash = rest.find('/');
    std::string_view raw = rest.substr(0, slash);
    const bool last = slash == std::string_view::npos;
    auto seg = normaliseSegment(raw, origin_target);
    if (!seg) return std::unexpected(seg.error());
    if (isDotSegment(*seg) && !isDotSegment(raw))
      return problem(Reason::kAmbiguousTarget,
                     "encoded dot segment '" + shown(raw) + "' in the request path '" +
                         shown(origin_target) + "'");
    if (auto semi = seg->find(';'); semi != std::string::npos) {
      if (isDotSegment(std::string_view(*seg).substr(0, semi)))
        return problem(Reason::kAmbiguousTarget,
                       "dot segment with parameters '" + shown(raw) + "' in the request path '" +
                           shown(origin_target) + "' (some servers read it as '..')");
    }
    if (*seg == "..") {
      if (!out.empty()) out.pop_back();
      trailing_slash = true;
    } else if (*seg == "." || seg->empty()) {
      trailing_slash = true;  // "a/." and "a/" both end in a directory; "a//b" drops the gap
    } else {
      out.push_back(std::move(*seg));
      trailing_slash = false;
    }
    if (last) break;
    rest.remove_prefix(slash + 1);
  }
  req.path = "/";
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i) req.path += '/';
    req.path += out[i];
  }
  if (trailing_slash && !out.empty()) req.path += '/';
  return req;
}

}  // namespace sluice::policy
