// policy::widens (widening.hpp): rule-by-rule coverage, erring towards "widens".
#include "sluice/policy/widening.hpp"

#include <algorithm>

namespace sluice::policy {
namespace {

bool under(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() && name.ends_with(suffix) &&
         name[name.size() - suffix.size() - 1] == '.';
}

// `inner` matches only names `outer` matches too (a regex only its identical self).
bool hostCovered(const HostPattern& inner, const HostPattern& outer) {
  using K = HostPattern::Kind;
  if (outer.kind == K::kRegex || inner.kind == K::kRegex)
    return inner.kind == outer.kind && inner.value == outer.value;
  if (outer.kind == K::kExact) return inner.kind == K::kExact && inner.value == outer.value;
  // outer `*.s` matches subdomains of s only: inner `s` itself is not under it.
  if (inner.kind == K::kExact) return under(inner.value, outer.value);
  return inner.value == outer.value || under(inner.value, outer.value);
}

bool cidrCovered(const Cidr& inner, const Cidr& outer) {
  return inner.network.isV4() == outer.network.isV4() && inner.prefix >= outer.prefix &&
         outer.contains(inner.network);
}

// A glob with one trailing `*` and no other wildcard: the prefix it stands for.
std::optional<std::string> globPrefix(const PathPattern& p) {
  if (p.regex || !p.pattern.ends_with('*')) return std::nullopt;
  std::string prefix = p.pattern.substr(0, p.pattern.size() - 1);
  if (prefix.find_first_of("*?") != std::string::npos) return std::nullopt;
  return prefix;
}

bool pathCovered(const PathPattern& inner, const PathPattern& outer) {
  if (inner.regex == outer.regex && inner.pattern == outer.pattern) return true;
  auto prefix = globPrefix(outer);
  return prefix && !inner.regex && inner.pattern.starts_with(*prefix);
}

template <typename T, typename Fn>
bool allCovered(const std::vector<T>& inner, const std::vector<T>& outer, Fn covered) {
  return std::all_of(inner.begin(), inner.end(), [&](const T& i) {
    return std::any_of(outer.begin(), outer.end(), [&](const T& o) { return covered(i, o); });
  });
}

bool portsCovered(const Rule& inner, const Rule& outer) {
  return allCovered(inner.ports, outer.ports, [](const PortRange& i, const PortRange& o) {
    return i.lo >= o.lo && i.hi <= o.hi;
  });
}

bool addressesCovered(const Rule& inner, const Rule& outer) {
  if (inner.allow_private && !outer.allow_private) return false;
  if (outer.cidrs.empty()) return !inner.cidrs.empty() ? !inner.hosts.empty() : true;
  // outer's addresses are bounded (and a cidrs-only rule matches IP literals): inner's must be.
  if (inner.cidrs.empty() || inner.hosts.empty() != outer.hosts.empty()) return false;
  return allCovered(inner.cidrs, outer.cidrs, cidrCovered);
}

bool requestsCovered(const Rule& inner, const Rule& outer) {
  if (inner.tls != outer.tls) return false;
  if (!outer.methods.empty() &&
      (inner.methods.empty() ||
       !allCovered(inner.methods, outer.methods, std::equal_to<std::string>())))
    return false;
  if (!outer.paths.empty() &&
      (inner.paths.empty() || !allCovered(inner.paths, outer.paths, pathCovered)))
    return false;
  if (inner.paths_case_insensitive && !outer.paths_case_insensitive) return false;
  if (inner.path_params_allowed && !outer.path_params_allowed) return false;
  if (inner.allow_plaintext_credentials && !outer.allow_plaintext_credentials) return false;
  return !inner.allow_get_body || outer.allow_get_body;
}

bool injectionCovered(const Inject& inner, const Inject& outer) {
  if (inner.empty()) return true;
  const auto& a = inner.secret_names;
  const auto& b = outer.secret_names;
  if (!std::includes(b.begin(), b.end(), a.begin(), a.end())) return false;
  // A minted token goes where its token_url says: the same endpoint only.
  const auto url = [](const Inject& i) {
    return i.oauth2 ? i.oauth2->token_url
                    : (i.google_service_account ? i.google_service_account->token_url : "");
  };
  return url(inner) == url(outer);
}

bool ruleCovered(const Rule& inner, const Rule& outer) {
  if (inner.action == Action::kAllow && outer.action != Action::kAllow) return false;
  if (outer.action == Action::kDeny) return false;
  return allCovered(inner.hosts, outer.hosts, hostCovered) && portsCovered(inner, outer) &&
         addressesCovered(inner, outer) && requestsCovered(inner, outer) &&
         injectionCovered(inner.inject, outer.inject);
}

// The same traffic matched (for deny and ask rules that must be kept).
bool sameMatch(const Rule& a, const Rule& b) {
  const auto texts = [](const auto& items) {
    std::vector<std::string> out;
    for (const auto& i : items) out.push_back(i.text);
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto cidrs = [](const Rule& r) {
    std::vector<std::string> out;
    for (const auto& c : r.cidrs) out.push_back(c.str());
    std::sort(out.begin(), out.end());
    return out;
  };
  auto ma = a.methods, mb = b.methods;
  std::sort(ma.begin(), ma.end());
  std::sort(mb.begin(), mb.end());
  return texts(a.hosts) == texts(b.hosts) && a.portsText() == b.portsText() &&
         cidrs(a) == cidrs(b) && ma == mb && texts(a.paths) == texts(b.paths) &&
         a.paths_case_insensitive == b.paths_case_insensitive;
}

void checkKept(const Workflow& old, const Workflow& next, std::vector<std::string>& out) {
  for (const auto& r : old.rules) {
    if (r.action == Action::kAllow) continue;
    const bool kept = std::any_of(next.rules.begin(), next.rules.end(), [&](const Rule& n) {
      return sameMatch(r, n) && (n.action == Action::kDeny || r.action == n.action);
    });
    if (!kept)
      out.push_back(std::string(actionName(r.action)) + " rule '" + r.id +
                    "' is not kept unchanged: what it " +
                    (r.action == Action::kDeny ? "refused" : "held for approval") +
                    " may now pass");
  }
}

void checkLimits(const Workflow& old, const Workflow& next, std::vector<std::string>& out) {
  const auto raised = [&](const char* name, std::uint64_t was, std::uint64_t now) {
    if (now > was)
      out.push_back(std::string("egress.limits.") + name + " is raised from " +
                    std::to_string(was) + " to " + std::to_string(now));
  };
  raised("max_connections", old.limits.max_connections, next.limits.max_connections);
  raised("max_bytes_out", old.limits.max_bytes_out, next.limits.max_bytes_out);
  raised("max_bytes_in", old.limits.max_bytes_in, next.limits.max_bytes_in);
  raised("max_requests", old.limits.max_requests, next.limits.max_requests);
  raised("max_dns_queries", old.limits.max_dns_queries, next.limits.max_dns_queries);
  if (old.sandbox.network == NetworkMode::kNone && next.sandbox.network != NetworkMode::kNone)
    out.push_back("sandbox.network goes from none to proxy");
}

}  // namespace

std::vector<std::string> widens(const Workflow& old, const Workflow& next) {
  std::vector<std::string> out;
  for (const auto& n : next.rules) {
    if (n.action == Action::kDeny) continue;
    const bool covered = std::any_of(old.rules.begin(), old.rules.end(),
                                     [&](const Rule& o) { return ruleCovered(n, o); });
    if (!covered)
      out.push_back(std::string(actionName(n.action)) + " rule '" + n.id + "' is not inside any " +
                    (n.action == Action::kAllow ? "allow" : "allow or ask") +
                    " rule of the current policy (hosts, ports, addresses, tls, methods, paths "
                    "or injected secrets)");
  }
  checkKept(old, next, out);
  checkLimits(old, next, out);
  return out;
}

}  // namespace sluice::policy
