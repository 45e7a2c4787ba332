// The compiled matcher: hash maps for exact hosts and *.suffix labels, one RE2::Set for host
// regexes, prefix tables for CIDRs. A decision looks up candidate rules in these indexes and
// then evaluates only those candidates (never a linear scan over all rules).
#include "sluice/policy/matcher.hpp"

#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "host_pattern.hpp"

namespace sluice::policy {
namespace {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using RuleMap =
    std::unordered_map<std::string, std::vector<std::uint32_t>, StringHash, std::equal_to<>>;

std::string addressKey(const IpAddress& a, int prefix) {
  auto b = a.bytes();
  int total = a.isV4() ? 4 : 16;
  int bits = prefix;
  for (int i = 0; i < total; ++i, bits -= 8) {
    std::uint8_t m = bits >= 8   ? 0xFF
                     : bits <= 0 ? 0
                                 : static_cast<std::uint8_t>(0xFF << (8 - bits));
    b[i] &= m;
  }
  return std::string(reinterpret_cast<const char*>(b.data()), static_cast<std::size_t>(total));
}

std::string listText(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out + "]";
}

std::string pathsText(const std::vector<PathPattern>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i].text;
  return out + "]";
}

// Nearest-miss kinds in order of how far the request got; the furthest wins.
// kParams: the rule would match but the path has `;` parameters it does not allow.
enum class Miss : int { kNone = 0, kPrivate, kPort, kInspection, kMethod, kPath, kParams };

}  // namespace

struct CompiledRule {
  const Rule* rule = nullptr;
  std::vector<std::unique_ptr<RE2>> host_res;  // for re: host patterns
  std::vector<std::unique_ptr<RE2>> path_res;  // parallel to rule->paths; null for globs
  std::vector<std::string> lower_globs;        // paths_case: insensitive: parallel, lower-cased
  bool cidr_only = false;                      // cidrs and no hosts: matches IP literals

  bool matchesHostSlow(const std::string& host) const {
    for (const auto& p : rule->hosts) {
      switch (p.kind) {
        case HostPattern::Kind::kExact:
          if (host == p.value) return true;
          break;
        case HostPattern::Kind::kSuffix:
          if (host.size() > p.value.size() + 1 && host.ends_with(p.value) &&
              host[host.size() - p.value.size() - 1] == '.') {
            return true;
          }
          break;
        case HostPattern::Kind::kRegex:
          break;
      }
    }
    for (const auto& re : host_res) {
      if (RE2::FullMatch(host, *re)) return true;
    }
    return false;
  }

  bool methodMatches(std::string_view method) const {
    if (rule->methods.empty()) return true;
    for (const auto& m : rule->methods) {
      if (m == method) return true;
    }
    return false;
  }

  bool pathMatches(std::string_view path) const {
    if (rule->paths.empty()) return true;
    if (rule->paths_case_insensitive) return pathMatchesAnyCase(path);
    for (std::size_t i = 0; i < rule->paths.size(); ++i) {
      if (path_res[i]) {
        if (RE2::FullMatch(re2::StringPiece(path.data(), path.size()), *path_res[i])) return true;
      } else if (detail::globMatch(rule->paths[i].pattern, path)) {
        return true;
      }
    }
    return false;
  }

  // paths_case: insensitive compares the ASCII-lower-cased path with the lower-cased globs
  // (the regexes were compiled case-insensitive); escapes are upper-case hex in the canonical
  // path and in patterns alike, so lower-casing both keeps them equal.
  bool pathMatchesAnyCase(std::string_view path) const {
    std::string lowered(path);
    for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (std::size_t i = 0; i < rule->paths.size(); ++i) {
      if (path_res[i]) {
        if (RE2::FullMatch(re2::StringPiece(path.data(), path.size()), *path_res[i])) return true;
      } else if (detail::globMatch(lower_globs[i], lowered)) {
        return true;
      }
    }
    return false;
  }

  // A deny rule (and an ask rule, which must not be skipped either) matches a path with `;`
  // parameters in both spellings: as sent, and as a servlet container routes it.
  bool pathMatchesEither(const HttpRequest& req) const {
    return pathMatches(req.path) || (req.hasPathParams() && pathMatches(req.bare_path));
  }

  bool cidrContains(const IpAddress& a) const {
    return std::any_of(rule->cidrs.begin(), rule->cidrs.end(),
                       [&](const Cidr& c) { return c.contains(a); });
  }
};

struct Matcher::Index {
  std::vector<CompiledRule> rules;
  RuleMap exact;
  RuleMap suffix;
  std::unique_ptr<RE2::Set> regex_set;
  std::vector<std::uint32_t> regex_rule;   // RE2::Set pattern index -> rule index
  std::vector<std::uint32_t> regex_rules;  // rules with re: hosts (fallback when the set fails)
  // CIDR prefix tables (cidr-only rules): prefix length -> masked address -> rules.
  std::vector<std::pair<int, RuleMap>> v4_prefixes, v6_prefixes;
  std::vector<std::uint32_t> deny_with_cidrs;  // checked at the address phase

  void addCidr(const Cidr& c, std::uint32_t idx) {
    auto& tables = c.network.isV4() ? v4_prefixes : v6_prefixes;
    auto it = std::find_if(tables.begin(), tables.end(),
                           [&](const auto& t) { return t.first == c.prefix; });
    if (it == tables.end()) {
      tables.emplace_back(c.prefix, RuleMap{});
      it = tables.end() - 1;
    }
    auto& v = it->second[addressKey(c.network, c.prefix)];
    if (v.empty() || v.back() != idx) v.push_back(idx);
  }

  void hostCandidates(const std::string& host, std::vector<std::uint32_t>& out) const {
    if (auto it = exact.find(host); it != exact.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    // Every proper suffix at a label boundary: a.b.example.com -> b.example.com, example.com, com.
    for (std::size_t dot = host.find('.'); dot != std::string::npos;
         dot = host.find('.', dot + 1)) {
      std::string_view rest = std::string_view(host).substr(dot + 1);
      if (auto it = suffix.find(rest); it != suffix.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
      }
    }
    if (regex_set) {
      std::vector<int> hits;
      RE2::Set::ErrorInfo info{};
      if (regex_set->Match(host, &hits, &info)) {
        for (int h : hits) out.push_back(regex_rule[static_cast<std::size_t>(h)]);
        return;
      }
      if (info.kind == RE2::Set::kNoError) return;  // no pattern matched
      // The DFA ran out of memory: fall through to the per-rule regexes rather than miss a
      // rule (a missed deny rule would fail open).
    }
    if (!regex_rules.empty()) {
      for (std::uint32_t idx : regex_rules) {
        for (const auto& re : rules[idx].host_res) {
          if (RE2::FullMatch(host, *re)) {
            out.push_back(idx);
            break;
          }
        }
      }
    }
  }

  void ipCandidates(const IpAddress& ip, std::vector<std::uint32_t>& out) const {
    const IpAddress* a = &ip;
    std::optional<IpAddress> v4;
    if (!ip.isV4()) {
      // An IPv4-mapped literal is that IPv4 address.
      auto b = ip.bytes();
      bool mapped = std::all_of(b.begin(), b.begin() + 10, [](auto x) { return x == 0; }) &&
                    b[10] == 0xFF && b[11] == 0xFF;
      if (mapped) {
        v4 = ip.embeddedV4();
        a = &*v4;
      }
    }
    const auto& tables = a->isV4() ? v4_prefixes : v6_prefixes;
    for (const auto& [prefix, map] : tables) {
      if (auto it = map.find(addressKey(*a, prefix)); it != map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
      }
    }
  }

  std::vector<std::uint32_t> candidates(const Target& t) const {
    std::vector<std::uint32_t> out;
    if (t.ip) {
      ipCandidates(*t.ip, out);
    } else {
      hostCandidates(t.host, out);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
};

Matcher::Matcher() = default;
Matcher::~Matcher() = default;

std::shared_ptr<const Matcher> Matcher::compile(std::shared_ptr<const Workflow> workflow,
                                                std::int64_t regex_set_budget) {
  std::shared_ptr<Matcher> m(new Matcher());
  m->workflow_ = std::move(workflow);
  m->index_ = std::make_unique<Index>();
  Index& ix = *m->index_;
  RE2::Options opts;
  opts.set_case_sensitive(false);
  opts.set_log_errors(false);
  RE2::Options path_opts;
  path_opts.set_log_errors(false);
  // The set's DFA gets a budget that grows with the number of patterns; if it still fails to
  // compile, or runs out of memory while matching, lookups fall back to per-rule regexes.
  RE2::Options set_opts = opts;
  std::size_t n_regex = 0;
  for (const auto& r : m->workflow_->rules) {
    for (const auto& h : r.hosts) n_regex += h.kind == HostPattern::Kind::kRegex;
  }
  set_opts.set_max_mem(
      regex_set_budget > 0
          ? regex_set_budget
          : std::max<std::int64_t>(8 << 20, static_cast<std::int64_t>(n_regex) * (64 << 10)));
  ix.rules.resize(m->workflow_->rules.size());
  for (std::uint32_t i = 0; i < m->workflow_->rules.size(); ++i) {
    const Rule& r = m->workflow_->rules[i];
    CompiledRule& cr = ix.rules[i];
    cr.rule = &r;
    cr.cidr_only = r.hosts.empty() && !r.cidrs.empty();
    for (const auto& h : r.hosts) {
      switch (h.kind) {
        case HostPattern::Kind::kExact: {
          auto& v = ix.exact[h.value];
          if (v.empty() || v.back() != i) v.push_back(i);
          break;
        }
        case HostPattern::Kind::kSuffix: {
          auto& v = ix.suffix[h.value];
          if (v.empty() || v.back() != i) v.push_back(i);
          break;
        }
        case HostPattern::Kind::kRegex: {
          if (!ix.regex_set) ix.regex_set = std::make_unique<RE2::Set>(set_opts, RE2::ANCHOR_BOTH);
          if (ix.regex_rules.empty() || ix.regex_rules.back() != i) ix.regex_rules.push_back(i);
          if (ix.regex_set->Add(h.value, nullptr) >= 0) ix.regex_rule.push_back(i);
          cr.host_res.push_back(std::make_unique<RE2>(h.value, opts));
          break;
        }
      }
    }
    if (cr.cidr_only) {
      for (const auto& c : r.cidrs) ix.addCidr(c, i);
    }
    if (r.action == Action::kDeny && !r.cidrs.empty()) ix.deny_with_cidrs.push_back(i);
    RE2::Options rule_path_opts = path_opts;
    rule_path_opts.set_case_sensitive(!r.paths_case_insensitive);
    for (const auto& p : r.paths) {
      cr.path_res.push_back(p.regex ? std::make_unique<RE2>(p.pattern, rule_path_opts) : nullptr);
      if (!r.paths_case_insensitive) continue;
      std::string glob = p.regex ? std::string() : p.pattern;
      for (char& c : glob) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      cr.lower_globs.push_back(std::move(glob));
    }
  }
  if (ix.regex_set && !ix.regex_set->Compile()) ix.regex_set.reset();
  // Longest prefixes first so lookups meet the most specific ranges early.
  auto byLen = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::sort(ix.v4_prefixes.begin(), ix.v4_prefixes.end(), byLen);
  std::sort(ix.v6_prefixes.begin(), ix.v6_prefixes.end(), byLen);
  return m;
}

namespace {

struct Evaluation {
  Miss miss = Miss::kNone;
  const Rule* miss_rule = nullptr;
  std::string miss_text;

  void note(Miss kind, const Rule* r, std::string text) {
    if (kind > miss) {
      miss = kind;
      miss_rule = r;
      miss_text = std::move(text);
    }
  }
};

Reason missReason(Miss m) {
  switch (m) {
    case Miss::kPort:
      return Reason::kPortNotAllowed;
    case Miss::kInspection:
      return Reason::kInspectionRequired;
    case Miss::kMethod:
      return Reason::kMethodNotAllowed;
    case Miss::kPath:
      return Reason::kPathNotAllowed;
    case Miss::kParams:
      return Reason::kAmbiguousTarget;
    case Miss::kPrivate:
      return Reason::kPrivateAddress;
    case Miss::kNone:
      break;
  }
  return Reason::kNoMatchingRule;
}

}  // namespace

// An ask rule asks where the proxy holds the traffic: at a request (plain HTTP, inspected TLS),
// or at the connection of a tunnel it will not see into (passthrough). At the connection of a
// tunnel it inspects, or of plain HTTP, it acts as an allow: each request asks.
static bool asksNow(const Rule& r, Visibility vis, bool request) {
  if (r.action != Action::kAsk) return false;
  return request || (vis == Visibility::kTunnel && r.tls != TlsMode::kInspect);
}

namespace {

enum class PathVerdict { kMatch, kMiss, kParams };

// Whether an allow or ask rule's paths admit the request. A path with `;` parameters is
// ambiguous (servlet containers route `/a;x/b` as `/a/b`, other servers as written): a rule
// that says `path_params: allow` matches it with them cut off (an ask rule in either spelling,
// so that the approver is never skipped); any other rule that would match it in either
// spelling refuses it (kParams) rather than guess which one the upstream reads.
PathVerdict pathVerdict(const CompiledRule& cr, const HttpRequest& req) {
  if (!req.hasPathParams())
    return cr.pathMatches(req.path) ? PathVerdict::kMatch : PathVerdict::kMiss;
  const Rule& r = *cr.rule;
  if (!cr.pathMatchesEither(req)) return PathVerdict::kMiss;
  if (!r.path_params_allowed) return PathVerdict::kParams;
  if (r.action == Action::kAsk || cr.pathMatches(req.bare_path)) return PathVerdict::kMatch;
  return PathVerdict::kMiss;
}

std::string paramsText(const Rule& r, const HttpRequest& req) {
  return "rule " + r.id + " would match " + req.path + " but its ';' path parameters are " +
         "ambiguous (servlet containers route it as " + req.bare_path + ") and the rule does " +
         "not say path_params: allow";
}

}  // namespace

// Shared by the connect and request phases. `req` is null at connect time.
// What a decision speaks of: "GET host:port/path" for a request, "host:port" for a connection.
static std::string subject(const HttpRequest* req, const std::string& where) {
  return req ? std::string(req->method) + " " + where + std::string(req->path) : where;
}

// `d` decided by rule `r` for `reason`.
static Decision decidedBy(Decision d, Reason reason, const Rule& r, std::string detail) {
  d.reason = reason;
  d.rule = &r;
  d.rule_id = r.id;
  d.detail = std::move(detail);
  return d;
}

// No rule allowed, asked or denied: the nearest miss, else why nothing could match.
static Decision noRuleDecides(Decision d, const Matcher::Index& ix, const Workflow& w,
                              const Target& t, const Evaluation& ev, const std::string& where) {
  d.allowed = false;
  if (ev.miss != Miss::kNone) {
    d.reason = missReason(ev.miss);
    d.rule = ev.miss_rule;
    d.rule_id = ev.miss_rule->id;
    if (ev.miss == Miss::kParams) {
      d.detail = ev.miss_text;  // not a miss: a refusal by the rule that would match
      return d;
    }
    d.nearest_miss = ev.miss_text;
    d.detail = "no rule allows " + where + "; nearest miss: " + ev.miss_text;
    return d;
  }
  if (t.ip) {
    d.reason = Reason::kIpLiteralNeedsCidrs;
    d.detail = t.host +
               " is an IP address: only rules with cidrs match IP destinations, and none "
               "contains it";
    return d;
  }
  d.reason = Reason::kNoMatchingRule;
  d.detail = "no rule matches host " + t.host;
  // The classic wildcard confusion: *.example.com does not cover example.com.
  if (auto it = ix.suffix.find(t.host); it != ix.suffix.end()) {
    const Rule& r = w.rules[it->second.front()];
    d.rule_id = r.id;
    d.rule = &r;
    d.nearest_miss = "rule " + r.id + " has *." + t.host + ", which matches subdomains of " +
                     t.host + " only, not " + t.host + " itself";
    d.detail += "; nearest miss: " + d.nearest_miss;
  }
  return d;
}

namespace {

// What one pass of evaluate() over the candidate rules has found so far.
struct Scan {
  Decision d;
  Evaluation ev;
  const Rule* first_allow = nullptr;    // the first allow or ask rule that matched
  const Rule* first_ask = nullptr;      // the first ask rule that asks at this phase
  const Rule* ambiguous_ask = nullptr;  // an ask rule a ';' path would otherwise skip
  bool inspect = false;
  std::string where;  // the target's authority
  // An address phase follows an allow or an ask (Query::address): it writes the decision's
  // detail, so this phase's would be built for nothing.
  bool address_follows = false;
};

// Whether deny rule `cr` (its port matched) denies now, at this phase.
bool denies(const CompiledRule& cr, const Target& t, Visibility vis, const HttpRequest* req,
            Scan& s) {
  const Rule& r = *cr.rule;
  // Hostnames under a rule that also names cidrs are checked at the address phase.
  if (!t.ip && !r.cidrs.empty()) return false;
  if (!r.hasRequestConditions()) return true;
  if (req == nullptr) {
    // Request conditions are judged per request; an inspecting deny rule forces
    // inspection so that it can be.
    if (vis == Visibility::kTunnel && r.tls == TlsMode::kInspect) s.inspect = true;
    return false;
  }
  return cr.methodMatches(req->method) && cr.pathMatchesEither(*req);
}

// Whether allow or ask rule `cr` (its port matched) matches at this phase: at a connection,
// unless it is a passthrough tunnel the rule's request conditions cannot be enforced in; at a
// request, when its methods and paths admit it. A rule that does not is noted as a miss.
bool admits(const CompiledRule& cr, Visibility vis, const HttpRequest* req, Scan& s) {
  const Rule& r = *cr.rule;
  if (req == nullptr) {
    if (!r.hasRequestConditions() || vis != Visibility::kTunnel || r.tls == TlsMode::kInspect)
      return true;
    s.ev.note(Miss::kInspection, &r,
              "rule " + r.id + " matched " + s.where +
                  " but restricts methods/paths, which a passthrough tunnel cannot enforce "
                  "(set tls: inspect)");
    return false;
  }
  if (!cr.methodMatches(req->method)) {
    s.ev.note(Miss::kMethod, &r,
              "rule " + r.id + " matched " + s.where + " but method " + std::string(req->method) +
                  " is not in " + listText(r.methods));
    return false;
  }
  const PathVerdict pv = pathVerdict(cr, *req);
  if (pv == PathVerdict::kMiss) {
    s.ev.note(Miss::kPath, &r,
              "rule " + r.id + " matched " + s.where + " and method " + std::string(req->method) +
                  " but path " + std::string(req->path) + " does not match " + pathsText(r.paths));
    return false;
  }
  if (pv == PathVerdict::kParams) {
    s.ev.note(Miss::kParams, &r, paramsText(r, *req));
    if (r.action == Action::kAsk && !s.ambiguous_ask) s.ambiguous_ask = &r;
    return false;
  }
  return true;
}

}  // namespace

// The decision once no deny rule decided: an ambiguous ask, an ask, an allow, or no rule.
static Decision conclude(Scan& s, const Matcher::Index& ix, const Workflow& w, const Target& t,
                         Visibility vis, const HttpRequest* req) {
  Decision& d = s.d;
  if (s.ambiguous_ask) {
    // An ask rule that does not allow path parameters is not skipped: refused as ambiguous.
    return decidedBy(std::move(d), Reason::kAmbiguousTarget, *s.ambiguous_ask,
                     paramsText(*s.ambiguous_ask, *req));
  }
  if (s.first_ask) {
    // An ask beats an allow (a deny has returned already).
    d.allowed = false;
    d.ask = true;
    d.tls = s.inspect ? TlsMode::kInspect : TlsMode::kPassthrough;
    if (s.address_follows)
      return decidedBy(std::move(d), Reason::kApprovalRequired, *s.first_ask, {});
    return decidedBy(
        std::move(d), Reason::kApprovalRequired, *s.first_ask,
        "rule " + s.first_ask->id + " asks an approver before allowing " + subject(req, s.where));
  }
  if (s.first_allow) {
    d.allowed = true;
    d.tls = s.inspect ? TlsMode::kInspect : TlsMode::kPassthrough;
    if (s.address_follows) return decidedBy(std::move(d), Reason::kAllowed, *s.first_allow, {});
    std::string detail = "rule " + s.first_allow->id + " allows " + subject(req, s.where);
    if (vis == Visibility::kTunnel && req == nullptr)
      detail += std::string(" (tls: ") + std::string(tlsModeName(d.tls)) + ")";
    return decidedBy(std::move(d), Reason::kAllowed, *s.first_allow, std::move(detail));
  }
  return noRuleDecides(std::move(d), ix, w, t, s.ev, s.where);
}

// The connect or request phase: the first deny rule that matches decides; else the matching
// allow and ask rules (collected in `allowing` for the address phase) do, in conclude().
static Decision evaluate(const Matcher::Index& ix, const Workflow& w, const Target& t,
                         Visibility vis, const HttpRequest* req,
                         std::vector<std::uint32_t>& allowing, bool address_follows) {
  Scan s;
  s.where = t.authority();
  s.address_follows = address_follows;
  for (std::uint32_t idx : ix.candidates(t)) {
    const CompiledRule& cr = ix.rules[idx];
    const Rule& r = *cr.rule;
    if (!r.allowsPort(t.port)) {
      s.ev.note(Miss::kPort, &r,
                "rule " + r.id + " matched host " + t.host + " but port " + std::to_string(t.port) +
                    " is not in " + r.portsText());
      continue;
    }
    if (r.hasRequestConditions()) s.d.request_rules = true;
    if (r.action == Action::kDeny) {
      if (!denies(cr, t, vis, req, s)) continue;
      s.d.allowed = false;
      return decidedBy(std::move(s.d), Reason::kDeniedByRule, r,
                       "rule " + r.id + " denies " + subject(req, s.where));
    }
    if (!admits(cr, vis, req, s)) continue;
    if (!s.first_allow) s.first_allow = &r;
    if (!s.first_ask && asksNow(r, vis, req != nullptr)) s.first_ask = &r;
    if (vis == Visibility::kTunnel && r.tls == TlsMode::kInspect) s.inspect = true;
    allowing.push_back(idx);
  }
  return conclude(s, ix, w, t, vis, req);
}

namespace {

// Plain http:// requests never carry injected credentials unless the deciding rule says
// `allow_plaintext_credentials: true`.
void refusePlaintextInjection(Decision& d) {
  if ((!d.allowed && !d.ask) || !d.rule || d.rule->inject.empty() ||
      d.rule->allow_plaintext_credentials) {
    return;
  }
  d.allowed = false;
  d.ask = false;
  d.reason = Reason::kPlaintextCredentials;
  d.detail = "rule " + d.rule->id +
             " injects credentials, which the proxy refuses to send "
             "over plain http:// unless allow_plaintext_credentials: true";
}

}  // namespace

Decision Matcher::decide(const Query& q) const {
  std::vector<std::uint32_t> allowing;
  Decision d;
  const bool address_follows = q.address != nullptr;  // decideAddress() writes the detail
  if (q.request) {
    d = evaluate(*index_, *workflow_, q.target, Visibility::kPlainHttp, q.request, allowing,
                 address_follows);
  } else {
    d = evaluate(*index_, *workflow_, q.target, q.visibility, nullptr, allowing, address_follows);
  }
  if ((d.allowed || d.ask) && q.address) d = decideAddress(std::move(d), allowing, q);
  if (q.plaintext && q.request) refusePlaintextInjection(d);
  if (d.ask && !q.approved_rule.empty() && d.rule_id == q.approved_rule) {
    d.ask = false;
    d.allowed = true;
    d.reason = Reason::kAllowed;
    d.detail = "rule " + d.rule_id + " allows " + q.target.authority() + " (approved)";
  }
  if (q.learn) d = learned(std::move(d), q);
  return d;
}

namespace {

// True when every port of `want` lies in one of `cover` (sorted by lo).
bool portsCovered(PortRange want, const std::vector<PortRange>& cover) {
  std::uint32_t next = want.lo;  // first port not yet known to be covered
  for (const auto& c : cover) {
    if (c.lo > next) break;
    if (std::uint32_t{c.hi} + 1 > next) next = std::uint32_t{c.hi} + 1;
    if (next > want.hi) return true;
  }
  return next > want.hi;
}

}  // namespace

bool Matcher::nameMayBeAllowed(std::string_view raw) const {
  return nameAnswer(raw).may_be_allowed;
}

Matcher::NameAnswer Matcher::nameAnswer(std::string_view raw, bool learn) const {
  NameAnswer a = ruledNameAnswer(raw);
  // Learn mode answers a name no rule names; a deny rule naming it still refuses.
  if (learn && !a.may_be_allowed && a.rule == nullptr) a = {true, nullptr, true};
  return a;
}

Matcher::NameAnswer Matcher::ruledNameAnswer(std::string_view raw) const {
  auto host = normalizeHostName(raw);
  if (!host) return {};
  // An IP literal in any spelling matches cidrs only, never a host pattern.
  if (parseIpLiteral(*host)) return {};
  std::vector<std::uint32_t> cands;
  index_->hostCandidates(*host, cands);
  std::sort(cands.begin(), cands.end());  // policy order: the first rule is the one named
  std::vector<PortRange> denied;          // ports every connection to `host` is refused on
  std::vector<const Rule*> allows, denies;
  for (std::uint32_t idx : cands) {
    const Rule& r = *index_->rules[idx].rule;
    if (r.action == Action::kAllow || r.action == Action::kAsk) {
      allows.push_back(&r);
    } else if (!r.hasRequestConditions() && r.cidrs.empty()) {
      denied.insert(denied.end(), r.ports.begin(), r.ports.end());
      denies.push_back(&r);
    }
  }
  std::sort(denied.begin(), denied.end(),
            [](const PortRange& a, const PortRange& b) { return a.lo < b.lo; });
  for (const Rule* r : allows) {
    for (const auto& p : r->ports)  // the loader fills in the default [80, 443]
      if (!portsCovered(p, denied)) return {true, r};
  }
  // Refused: by the deny rule that covers an allowed port, else by any deny rule naming it.
  for (const Rule* d : denies)
    for (const auto& dp : d->ports)
      for (const Rule* r : allows)
        for (const auto& p : r->ports)
          if (dp.lo <= p.hi && p.lo <= dp.hi) return {false, d};
  return {false, denies.empty() ? nullptr : denies.front()};
}

namespace {

// The first deny rule with cidrs that refuses `q`'s address: a hostname it names (or any, for
// a cidr-only deny rule) that resolves into its ranges.
std::optional<Decision> deniedAtAddress(const Matcher::Index& ix, const Query& q,
                                        bool request_rules) {
  const Target& target = q.target;
  const IpAddress& addr = *q.address;
  for (std::uint32_t idx : ix.deny_with_cidrs) {
    const CompiledRule& cr = ix.rules[idx];
    const Rule& r = *cr.rule;
    if (!r.allowsPort(target.port) || !cr.cidrContains(addr)) continue;
    if (!r.hosts.empty() && (target.ip || !cr.matchesHostSlow(target.host))) continue;
    if (r.hasRequestConditions() &&
        !(q.request && cr.methodMatches(q.request->method) && cr.pathMatchesEither(*q.request))) {
      continue;  // judged per request: only a request it names is refused
    }
    Decision d;
    d.request_rules = request_rules;
    d.reason = Reason::kDeniedByRule;
    d.rule = &r;
    d.rule_id = r.id;
    d.detail = "rule " + r.id + " denies address " + addr.str() +
               (target.ip ? std::string() : " (resolved from " + target.host + ")");
    return d;
  }
  return std::nullopt;
}

// The allow and ask rules of the earlier phases, seen at the address.
struct AddressScan {
  AddressClass cls = AddressClass::kGlobal;
  bool global = true;
  const Rule* wanted_private = nullptr;  // the first that matched but lacks allow_private
  const Rule* wanted_cidr = nullptr;     // the first whose cidrs do not contain the address
  const Rule* allow = nullptr;           // the first rule that allows at this address
  const Rule* ask = nullptr;             // the first ask rule that asks at this address
};

AddressScan scanAtAddress(const Matcher::Index& ix, const std::vector<std::uint32_t>& allowing,
                          const Query& q) {
  AddressScan s;
  const IpAddress& addr = *q.address;
  s.cls = classifyAddress(addr);
  s.global = s.cls == AddressClass::kGlobal;
  const bool request = q.request != nullptr;
  const Visibility vis = request ? Visibility::kPlainHttp : q.visibility;
  for (std::uint32_t idx : allowing) {
    const CompiledRule& cr = ix.rules[idx];
    const Rule& r = *cr.rule;
    if (!r.cidrs.empty() && !cr.cidrContains(addr)) {
      if (!s.wanted_cidr) s.wanted_cidr = &r;
      continue;
    }
    if (!s.global && !r.allow_private) {
      if (!s.wanted_private) s.wanted_private = &r;
      continue;
    }
    if (asksNow(r, vis, request)) {
      s.ask = &r;
      break;  // an ask beats an allow
    }
    if (!s.allow) s.allow = &r;
  }
  return s;
}

// No rule allows or asks at the address: private without allow_private, or outside the cidrs.
Decision refusedAtAddress(const AddressScan& s, const Query& q, bool request_rules) {
  const Target& target = q.target;
  const IpAddress& addr = *q.address;
  Decision d;
  d.allowed = false;
  d.request_rules = request_rules;
  std::string from = target.ip ? addr.str() : target.host + " resolves to " + addr.str();
  const std::string class_name(addressClassName(s.cls));
  if (!s.global && !(s.wanted_cidr && s.wanted_cidr->allow_private)) {
    d.reason = Reason::kPrivateAddress;
    const Rule* r = s.wanted_private ? s.wanted_private : s.wanted_cidr;
    d.rule = r;
    if (r) d.rule_id = r->id;
    d.detail =
        from + ", a " + class_name +
        " address; reaching it needs a rule with allow_private: true and cidrs containing it";
    d.nearest_miss =
        r ? "rule " + r->id + " matched " + target.host + " but " +
                (s.wanted_private ? std::string("does not set allow_private: true")
                                  : std::string("its cidrs do not contain ") + addr.str())
          : std::string();
    return d;
  }
  // Global, or non-global under a rule that allows private ranges: the cidrs decided.
  d.reason = Reason::kAddressNotInCidrs;
  d.rule = s.wanted_cidr;
  if (s.wanted_cidr) d.rule_id = s.wanted_cidr->id;
  d.detail = from + (s.global ? std::string() : ", a " + class_name + " address") +
             ", which is outside the cidrs of every rule that matched the host";
  if (s.wanted_cidr) {
    std::string cidrs;
    for (const auto& c : s.wanted_cidr->cidrs) cidrs += (cidrs.empty() ? "" : ", ") + c.str();
    d.nearest_miss = "rule " + s.wanted_cidr->id + " matched host " + target.host + " but " +
                     addr.str() + " is not in [" + cidrs + "]";
  }
  return d;
}

}  // namespace

// The address phase: a deny rule with cidrs refuses; else the first ask, or the first allow,
// of the rules that matched so far decides, if the address is theirs.
Decision Matcher::decideAddress(Decision connect, const std::vector<std::uint32_t>& allowing,
                                const Query& q) const {
  if (auto denied = deniedAtAddress(*index_, q, connect.request_rules)) return std::move(*denied);
  const AddressScan s = scanAtAddress(*index_, allowing, q);
  const Rule* r = s.ask ? s.ask : s.allow;
  if (!r) return refusedAtAddress(s, q, connect.request_rules);
  Decision d = std::move(connect);
  d.rule = r;
  d.rule_id = r->id;
  d.allowed = s.ask == nullptr;
  d.ask = s.ask != nullptr;
  d.reason = s.ask ? Reason::kApprovalRequired : Reason::kAllowed;
  // Built in one buffer: every allowed request carries this sentence.
  const std::string at = q.address->str();
  const std::string_view verb = s.ask ? " asks an approver before allowing " : " allows ";
  d.detail.clear();
  d.detail.reserve(48 + r->id.size() + verb.size() + q.target.host.size() + at.size());
  d.detail.append("rule ").append(r->id).append(verb).append(q.target.host).append(" at ");
  d.detail.append(at);
  if (!s.global) d.detail.append(" (").append(addressClassName(s.cls)).append(", allow_private)");
  return d;
}

namespace {

// What learn mode lets through: traffic the policy has no rule for (none matched, or the
// nearest one's port, method or path did not fit). Never a deny rule's refusal, the address
// guard's, an ask, or a form the proxy refuses (ambiguous paths, IP literals without cidrs,
// plaintext credentials).
bool learnable(const Decision& d) {
  if (d.allowed || d.ask) return false;
  return d.reason == Reason::kNoMatchingRule || d.reason == Reason::kPortNotAllowed ||
         d.reason == Reason::kMethodNotAllowed || d.reason == Reason::kPathNotAllowed;
}

// The SSRF guard for learned traffic: a non-global address only when the nearest rule allows
// private addresses and its cidrs contain it (as an allow at that address would need).
bool learnableAt(const Rule* nearest, const IpAddress& addr) {
  if (classifyAddress(addr) == AddressClass::kGlobal) return true;
  if (!nearest || !nearest->allow_private) return false;
  return std::any_of(nearest->cidrs.begin(), nearest->cidrs.end(),
                     [&](const Cidr& c) { return c.contains(addr); });
}

}  // namespace

Decision Matcher::learned(Decision d, const Query& q) const {
  if (!learnable(d)) return d;
  if (q.address) {
    // Explicit deny rules with cidrs still refuse at the address.
    if (auto denied = deniedAtAddress(*index_, q, d.request_rules)) return std::move(*denied);
    if (!learnableAt(d.rule, *q.address)) {
      Decision g;
      g.request_rules = d.request_rules;
      g.reason = Reason::kPrivateAddress;
      g.detail =
          (q.target.ip ? q.address->str() : q.target.host + " resolves to " + q.address->str()) +
          ", a " + std::string(addressClassName(classifyAddress(*q.address))) +
          " address; learn mode lets through only what a rule with allow_private: true "
          "and cidrs containing it would";
      return g;
    }
  }
  d.allowed = true;
  d.learned = true;
  return d;
}

}  // namespace sluice::policy
