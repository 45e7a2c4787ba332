// Normalising destinations: host names, IP literals, CONNECT authorities and absolute URLs.
#include "sluice/policy/target.hpp"

#include <algorithm>
#include <charconv>

namespace sluice::policy {
namespace {

bool isAllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The WHATWG URL parser treats a host whose last label is a number as an IPv4 address and
// fails it if it does not parse; we refuse such hosts instead of treating them as names.
bool endsInNumber(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  auto dot = host.rfind('.');
  std::string_view last = dot == std::string_view::npos ? host : host.substr(dot + 1);
  if (isAllDigits(last)) return true;
  if (last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
    return std::all_of(last.begin() + 2, last.end(),
                       [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  }
  return false;
}

std::expected<std::uint16_t, std::string> parsePort(std::string_view s) {
  unsigned v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || !isAllDigits(s) || ec != std::errc() || ptr != s.data() + s.size() || v == 0 ||
      v > 65535) {
    return std::unexpected("bad port '" + std::string(s) + "' (expected 1-65535)");
  }
  return static_cast<std::uint16_t>(v);
}

}  // namespace

std::string Target::authority() const {
  std::string h = (ip && !ip->isV4()) ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

std::expected<std::string, std::string> normalizeHostName(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty()) return std::unexpected("empty host name");
  std::string out;
  out.reserve(host.size());
  for (char c : host) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      return std::unexpected("host '" + std::string(host) +
                             "' is not ASCII: write internationalised names in punycode (xn--...)");
    }
    out.push_back(static_cast<char>(std::tolower(u)));
  }
  if (out.size() > 253) return std::unexpected("host name is longer than 253 characters");
  std::size_t start = 0;
  while (true) {
    std::size_t dot = out.find('.', start);
    std::string_view label =
        std::string_view(out).substr(start, dot == std::string::npos ? dot : dot - start);
    if (label.empty()) return std::unexpected("host '" + out + "' has an empty label");
    if (label.size() > 63) {
      return std::unexpected("host '" + out + "' has a label longer than 63 characters");
    }
    for (char c : label) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
        return std::unexpected("host '" + out + "' contains '" + std::string(1, c) +
                               "' (letters, digits, '-' and '_' only)");
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return std::unexpected("host '" + out + "' has a label starting or ending with '-'");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

std::expected<Target, std::string> makeTarget(std::string_view host, std::uint16_t port) {
  if (port == 0) return std::unexpected("port 0 is not a destination");
  Target t;
  t.port = port;
  if (!host.empty() && host.front() == '[') {
    auto ip = parseIpLiteral(host);
    if (!ip || ip->isV4()) return std::unexpected("bad IPv6 literal '" + std::string(host) + "'");
    t.ip = ip;
    t.host = ip->str();
    return t;
  }
  if (auto ip = parseIpLiteral(host)) {
    t.ip = ip;
    t.host = ip->str();
    return t;
  }
  if (host.find(':') != std::string_view::npos) {
    return std::unexpected("bad IPv6 literal '" + std::string(host) + "'");
  }
  if (endsInNumber(host)) {
    return std::unexpected("host '" + std::string(host) +
                           "' looks like an IPv4 address but is not one");
  }
  auto name = normalizeHostName(host);
  if (!name) return std::unexpected(name.error());
  t.host = std::move(*name);
  return t;
}

std::expected<Target, std::string> parseAuthority(std::string_view authority) {
  std::string_view host, port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos || close + 1 >= authority.size() ||
        authority[close + 1] != ':') {
      return std::unexpected("bad authority '" + std::string(authority) + "' (expected [v6]:port)");
    }
    host = authority.substr(0, close + 1);
    port = authority.substr(close + 2);
  } else {
    auto colon = authority.rfind(':');
    if (colon == std::string_view::npos) {
      return std::unexpected("bad authority '" + std::string(authority) + "' (expected host:port)");
    }
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  auto p = parsePort(port);
  if (!p) return std::unexpected(p.error());
  return makeTarget(host, *p);
}

std::expected<ParsedUrl, std::string> parseUrl(std::string_view url) {
  ParsedUrl out;
  auto sep = url.find("://");
  if (sep == std::string_view::npos) {
    return std::unexpected("bad URL '" + std::string(url) + "' (expected http://host/path)");
  }
  for (char c : url.substr(0, sep)) out.scheme.push_back(static_cast<char>(std::tolower(c)));
  std::uint16_t default_port = 0;
  if (out.scheme == "http") {
    default_port = 80;
  } else if (out.scheme == "https") {
    default_port = 443;
  } else {
    return std::unexpected("unsupported URL scheme '" + out.scheme + "' (http or https only)");
  }
  std::string_view rest = url.substr(sep + 3);
  auto auth_end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, auth_end);
  // The path and query are checked by canonicalRequest (request.hpp), which refuses what is
  // ambiguous with its own reason; the authority is checked here.
  if (authority.find_first_of("\\# \t\r\n") != std::string_view::npos) {
    return std::unexpected("bad URL '" + std::string(url) +
                           "': contains a character not allowed here");
  }
  std::string_view tail = auth_end == std::string_view::npos ? "" : rest.substr(auth_end);
  if (authority.find('@') != std::string_view::npos) {
    return std::unexpected("URL with user info is refused: '" + std::string(url) + "'");
  }
  if (authority.find('%') != std::string_view::npos) {
    return std::unexpected("percent-encoded host is refused: '" + std::string(authority) + "'");
  }
  std::string_view host = authority;
  std::uint16_t port = default_port;
  std::size_t colon = std::string_view::npos;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return std::unexpected("bad IPv6 literal in URL");
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return std::unexpected("bad authority in URL");
      colon = close + 1;
    }
  } else {
    colon = authority.rfind(':');
  }
  if (colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    auto p = parsePort(authority.substr(colon + 1));
    if (!p) return std::unexpected(p.error());
    port = *p;
  }
  if (host.empty()) return std::unexpected("URL has no host: '" + std::string(url) + "'");
  auto target = makeTarget(host, port);
  if (!target) return std::unexpected(target.error());
  out.target = std::move(*target);
  auto q = tail.find('?');
  out.path = std::string(tail.substr(0, q));
  if (out.path.empty()) out.path = "/";
  if (q != std::string_view::npos) out.query = std::string(tail.substr(q + 1));
  return out;
}

}  // namespace sluice::policy
