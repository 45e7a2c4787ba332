// Host pattern parsing and glob matching (the indexes themselves live in matcher.cpp).
#include <re2/re2.h>

#include <array>

#include "host_pattern.hpp"
#include "sluice/policy/ip_address.hpp"
#include "sluice/policy/target.hpp"

namespace sluice::policy::detail {

bool isPublicSuffix(std::string_view suffix) {
  // Every single-label suffix is a TLD. Multi-label ones: the widely used registry and
  // hosting suffixes where `*.suffix` would match every customer's domain.
  if (suffix.find('.') == std::string_view::npos) return true;
  static constexpr std::array<std::string_view, 40> kSuffixes = {"co.uk",
                                                                 "org.uk",
                                                                 "ac.uk",
                                                                 "gov.uk",
                                                                 "me.uk",
                                                                 "com.au",
                                                                 "net.au",
                                                                 "org.au",
                                                                 "edu.au",
                                                                 "co.jp",
                                                                 "ne.jp",
                                                                 "or.jp",
                                                                 "co.nz",
                                                                 "co.za",
                                                                 "com.br",
                                                                 "com.cn",
                                                                 "com.mx",
                                                                 "com.tr",
                                                                 "co.in",
                                                                 "co.kr",
                                                                 "github.io",
                                                                 "gitlab.io",
                                                                 "herokuapp.com",
                                                                 "appspot.com",
                                                                 "blogspot.com",
                                                                 "cloudfront.net",
                                                                 "amazonaws.com",
                                                                 "s3.amazonaws.com",
                                                                 "azurewebsites.net",
                                                                 "vercel.app",
                                                                 "netlify.app",
                                                                 "pages.dev",
                                                                 "workers.dev",
                                                                 "web.app",
                                                                 "firebaseapp.com",
                                                                 "ngrok.io",
                                                                 "ngrok-free.app",
                                                                 "trycloudflare.com",
                                                                 "repl.co",
                                                                 "glitch.me"};
  for (auto s : kSuffixes) {
    if (s == suffix) return true;
  }
  return false;
}

std::expected<HostPattern, std::string> parseHostPattern(std::string_view text) {
  HostPattern p;
  p.text = std::string(text);
  if (text.empty()) return std::unexpected("empty host pattern");
  if (text.starts_with("re:")) {
    std::string_view re = text.substr(3);
    if (re.empty()) return std::unexpected("empty regular expression after 're:'");
    RE2::Options opts;
    opts.set_case_sensitive(false);
    opts.set_log_errors(false);
    RE2 compiled(re2::StringPiece(re.data(), re.size()), opts);
    if (!compiled.ok()) {
      return std::unexpected("invalid regular expression '" + std::string(re) +
                             "': " + compiled.error());
    }
    p.kind = HostPattern::Kind::kRegex;
    p.value = std::string(re);
    return p;
  }
  if (parseIpLiteral(text)) {
    return std::unexpected(
        "'" + std::string(text) +
        "' is an IP address: IP destinations are matched by 'cidrs', not 'hosts'");
  }
  if (text.starts_with("*.")) {
    std::string_view rest = text.substr(2);
    if (rest.find('*') != std::string_view::npos) {
      return std::unexpected("'*' may only be the whole first label, as in *.example.com");
    }
    auto suffix = normalizeHostName(rest);
    if (!suffix) return std::unexpected(suffix.error());
    if (isPublicSuffix(*suffix)) {
      return std::unexpected("'" + std::string(text) + "' covers the public suffix '" + *suffix +
                             "' (every domain under it); name the domains you mean");
    }
    if (auto t = makeTarget("x." + *suffix, 443); !t) {
      return std::unexpected("'" + std::string(text) + "' can never match: " + t.error());
    }
    p.kind = HostPattern::Kind::kSuffix;
    p.value = std::move(*suffix);
    return p;
  }
  if (text.find('*') != std::string_view::npos) {
    return std::unexpected("'*' may only be the whole first label, as in *.example.com (got '" +
                           std::string(text) + "')");
  }
  auto host = normalizeHostName(text);
  if (!host) return std::unexpected(host.error());
  if (auto t = makeTarget(*host, 443); !t) {
    return std::unexpected("'" + std::string(text) + "' can never match: " + t.error());
  }
  p.kind = HostPattern::Kind::kExact;
  p.value = std::move(*host);
  return p;
}

bool globMatch(std::string_view pattern, std::string_view text) {
  // Iterative wildcard match with single-star backtracking: linear-ish, no recursion.
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace sluice::policy::detail
