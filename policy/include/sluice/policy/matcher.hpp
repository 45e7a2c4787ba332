// The compiled policy of one workflow, and the decisions it makes.
//
// One call (Matcher::decide) takes everything the proxy knows about a connection or a request
// and runs every phase on it:
//  - connection: (host or IP literal, port);
//  - request: the canonical (method, path) of a request the proxy can see (plain HTTP, plain
//    HTTP inside a CONNECT tunnel, or inside an inspected TLS tunnel);
//  - address: the address the proxy dials (SSRF guard, rule cidrs, deny rules with cidrs);
//  - plaintext credentials: an injecting rule does not allow a plain-HTTP request unless
//    it says allow_plaintext_credentials.
// Any matching deny rule beats every allow; no match is a deny ("default deny").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/policy/ip_address.hpp"
#include "sluice/policy/reason.hpp"
#include "sluice/policy/request.hpp"
#include "sluice/policy/target.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// The outcome of a decision.
struct Decision {
  bool allowed = false;
  Reason reason = Reason::kNoMatchingRule;
  std::string rule_id;       // the deciding rule; for a default deny, the nearest miss's rule
  std::string detail;        // one sentence a person can act on
  std::string nearest_miss;  // for a default deny: "rule X matched host H but port P ..."
  TlsMode tls = TlsMode::kPassthrough;  // connection: inspect if any allowing rule says so
  const Rule* rule = nullptr;           // the deciding rule (allow or deny), if any
  /// Connection: a rule with methods/paths (allow or deny) covers this host and port, so the
  /// requests in a tunnel to it must be seen (plain HTTP or inspected TLS) to be judged.
  bool request_rules = false;
  /// An ask rule (`rule`) matched: `allowed` is false (reason approval_required) until an
  /// approver allows it; the proxy then decides again with Query::approved_rule set. Fails
  /// closed for any caller that does not handle approvals.
  bool ask = false;
  /// Learn mode (Query::learn) let through what the policy denies: `allowed` is true, and
  /// `reason`, `rule_id`, `detail` and `nearest_miss` stay the denial's (a would_deny row).
  bool learned = false;
};

/// "allow", "deny" or "ask": the word `policy explain`, `policy test` and audit rows use.
inline std::string_view decisionName(const Decision& d) {
  return d.allowed ? "allow" : d.ask ? "ask" : "deny";
}

/// How the proxy will see the traffic on a connection; decides whether request-level
/// conditions (methods, paths) can be enforced.
enum class Visibility : std::uint8_t {
  kPlainHttp,  // absolute-form http:// requests: every request visible
  kTunnel,     // CONNECT: visible only if the connect decision says tls: inspect
};

/// One question for the policy: a connection (no request) or one request on it, optionally at
/// the address the proxy will dial (or has dialled). Without an address the answer is
/// provisional: a proxy decides again, with the address, before any byte goes upstream.
struct Query {
  const Target& target;
  Visibility visibility = Visibility::kTunnel;  // for a connection (no request)
  const HttpRequest* request = nullptr;         // canonical (request.hpp)
  const IpAddress* address = nullptr;           // resolved or literal address to dial
  /// The request travels as plain HTTP (not inside TLS): a rule that injects credentials
  /// allows it only with allow_plaintext_credentials.
  bool plaintext = false;
  /// The id of an ask rule an approver has allowed for this connection or request: a decision
  /// that would ask by that rule allows instead (the approval was for exactly it).
  std::string_view approved_rule = {};
  /// Learn mode (`sluice run --learn`): what no rule explicitly refuses is allowed with
  /// Decision::learned set; deny rules, the address guard and refused forms still refuse.
  bool learn = false;
};

class Matcher {
 public:
  /// Compiles a validated workflow (the loader's output). Never fails for such input.
  /// `regex_set_budget` (bytes) overrides the memory budget of the host-regex RE2::Set
  /// (0 = sized from the number of patterns); when the set cannot be built within it, or its
  /// DFA runs out while matching, lookups fall back to the per-rule regexes.
  static std::shared_ptr<const Matcher> compile(std::shared_ptr<const Workflow> workflow,
                                                std::int64_t regex_set_budget = 0);

  const Workflow& workflow() const { return *workflow_; }

  /// The one call: every phase (connection, request, address with the SSRF guard and rule
  /// cidrs, plaintext credentials) for `q`. The proxy, `policy explain` and `policy test`
  /// all decide through it.
  Decision decide(const Query& q) const;

  /// The DNS question (sluice's DNS, DESIGN.md "Transparent capture and DNS"): could an allow
  /// rule match a connection to host name `host` on any port? False when no allow rule's host
  /// patterns match it, when deny rules without request conditions or cidrs cover every port
  /// the matching allow rules allow, and for IP literals (they match cidrs only). `host` is
  /// normalised first (lower-case, trailing dot removed); a malformed name is false. Rules with
  /// cidrs, methods or paths still count: the connection that follows is decided in full.
  bool nameMayBeAllowed(std::string_view host) const;

  /// nameMayBeAllowed with the rule behind the answer (dns_queries.rule_id): when the name may
  /// be allowed, the first allow or ask rule (policy order) that matches it on a port no deny
  /// rule covers; when allow rules match but deny rules cover all their ports, the first deny
  /// rule that covers one of those ports; else the first deny rule (without request conditions
  /// or cidrs) whose hosts match the name; else none (no rule names it). With `learn` (learn
  /// mode, as Query::learn), a name no rule names may be allowed too, with `learned` set.
  struct NameAnswer {
    bool may_be_allowed = false;
    const Rule* rule = nullptr;
    bool learned = false;
  };
  NameAnswer nameAnswer(std::string_view host, bool learn = false) const;

  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  struct Index;  // opaque; defined in matcher.cpp

 private:
  Matcher();
  // The address phase of decide(): `allowing` are the allow rules that matched the rest.
  Decision decideAddress(Decision connect, const std::vector<std::uint32_t>& allowing,
                         const Query& q) const;
  // nameAnswer as the rules alone answer it (no learn mode).
  NameAnswer ruledNameAnswer(std::string_view host) const;
  // Learn mode's last word on `d` (Query::learn).
  Decision learned(Decision d, const Query& q) const;
  std::shared_ptr<const Workflow> workflow_;
  std::unique_ptr<Index> index_;
};

}  // namespace sluice::policy
