// The compiled policy of one workflow, and the decisions it makes.
//
// A decision is taken in phases, as the proxy sees traffic:
//  1. connect: (host or IP literal, port) when a CONNECT or an origin connection is asked for;
//  2. address: each address the proxy resolved for that host (SSRF guard, rule cidrs);
//  3. request: (method, path) for every request the proxy can see (plain HTTP, or inside
//     an inspected TLS tunnel).
// Any matching deny rule beats every allow; no match is a deny ("default deny").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/policy/ip_address.hpp"
#include "sluice/policy/target.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// Why a decision went the way it did. Names (reasonName) are stable: they appear in audit
/// rows, `X-Sluice-Reason` headers and `policy explain --json`.
enum class Reason : std::uint8_t {
  kAllowed,
  kDeniedByRule,
  kNoMatchingRule,
  kPortNotAllowed,
  kMethodNotAllowed,
  kPathNotAllowed,
  kPrivateAddress,       // resolved/literal address is non-global and no rule permits it
  kAddressNotInCidrs,    // rule has cidrs and the address is outside them
  kIpLiteralNeedsCidrs,  // IP-literal destination and only host-pattern rules
  kInspectionRequired,   // rule restricts methods/paths but the traffic is not inspected
  kInvalidTarget,
  // Set by the proxy, not the matcher; listed so every component shares one vocabulary.
  kLimitExceeded,
  kProxyLoop,
  kPlaintextCredentials,
  kUpstreamError,
  kHostMismatch,
};

std::string_view reasonName(Reason r);

/// The outcome of one phase.
struct Decision {
  bool allowed = false;
  Reason reason = Reason::kNoMatchingRule;
  std::string rule_id;       // the deciding rule; for a default deny, the nearest miss's rule
  std::string detail;        // one sentence a person can act on
  std::string nearest_miss;  // for a default deny: "rule X matched host H but port P ..."
  TlsMode tls = TlsMode::kPassthrough;    // connect phase: inspect if any allowing rule says so
  const Rule* rule = nullptr;             // the deciding rule (allow or deny), if any
  std::vector<std::uint32_t> candidates;  // connect phase: allow rules that matched host+port
  // Set by decideRequest, so that decideAddress can apply deny rules that combine cidrs with
  // methods/paths. The proxy calls decideAddress after every decideRequest, with the address
  // the request's connection was (or will be) dialled to.
  bool has_request = false;
  std::string method;
  std::string path;
};

/// How the proxy will see the traffic on a connection; decides whether request-level
/// conditions (methods, paths) can be enforced.
enum class Visibility : std::uint8_t {
  kPlainHttp,  // absolute-form http:// requests: every request visible
  kTunnel,     // CONNECT: visible only if the connect decision says tls: inspect
};

/// Plain http:// requests never carry injected credentials unless the deciding rule says
/// `allow_plaintext_credentials: true`: turns such an allowing request decision into a deny
/// with reason plaintext_credentials. Used by the proxy and by `policy explain` alike.
void refusePlaintextInjection(Decision& d);

class Matcher {
 public:
  /// Compiles a validated workflow (the loader's output). Never fails for such input.
  /// `regex_set_budget` (bytes) overrides the memory budget of the host-regex RE2::Set
  /// (0 = sized from the number of patterns); when the set cannot be built within it, or its
  /// DFA runs out while matching, lookups fall back to the per-rule regexes.
  static std::shared_ptr<const Matcher> compile(std::shared_ptr<const Workflow> workflow,
                                                std::int64_t regex_set_budget = 0);

  const Workflow& workflow() const { return *workflow_; }

  /// Phase 1. For kTunnel, a rule with methods/paths counts only if it has tls: inspect.
  Decision decideConnect(const Target& target, Visibility visibility) const;

  /// Phase 2: may the proxy dial `addr` for this allowed connect (or request) decision?
  /// Applies the rule cidrs, deny rules with cidrs, and the SSRF guard (non-global needs
  /// allow_private and the address in cidrs). Call it for every resolved address before
  /// dialling, and after every decideRequest with the connection's vetted address.
  Decision decideAddress(const Decision& connect, const Target& target,
                         const IpAddress& addr) const;

  /// Phase 3: one request on a connection whose target was allowed (plain HTTP, or an
  /// inspected tunnel). Deny rules with matching methods/paths apply here.
  Decision decideRequest(const Target& target, std::string_view method,
                         std::string_view path) const;

  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  struct Index;  // opaque; defined in matcher.cpp

 private:
  Matcher();
  std::shared_ptr<const Workflow> workflow_;
  std::unique_ptr<Index> index_;
};

}  // namespace sluice::policy
