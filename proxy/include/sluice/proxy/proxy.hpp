// The egress proxy: CONNECT tunnels and absolute-form HTTP forwarding under per-workflow
// policy, with the SSRF guard, workflow limits and audit events. One Proxy serves many
// listeners; each listener belongs to one execution (or a standalone workflow) and carries
// that workflow's compiled matcher, so attribution is by the socket a client connected to.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <vector>

#include "sluice/audit/event_sink.hpp"
#include "sluice/base/error.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/approvals.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/resolver.hpp"
#include "sluice/proxy/synthetic_names.hpp"

namespace sluice::proxy {

/// A control-plane failure (bind, listen, bad fd), with a message a user can act on.
/// The proxy's control-plane errors are base's (one error type across components).
using Error = base::Error;

struct ProxyOptions {
  unsigned threads = 0;  ///< I/O threads; 0 = number of cores
  /// Whole request header must arrive within this (slow-loris guard).
  std::chrono::milliseconds header_timeout{10000};
  /// A tunnel with no bytes either way, or a keep-alive client between requests, is closed.
  std::chrono::milliseconds idle_timeout{300000};
  /// Dialling the vetted upstream address (502 on failure, 504 on timeout).
  std::chrono::milliseconds connect_timeout{10000};
  /// Waiting for the upstream response header / any upstream read (504).
  std::chrono::milliseconds upstream_timeout{30000};
  /// How long stop() lets in-flight connections finish before closing them.
  std::chrono::milliseconds drain_timeout{5000};
  /// How long an inspected tunnel's idle upstream connection waits, once the tunnel ended,
  /// for the next tunnel of the same account to the same target (0: never kept).
  std::chrono::milliseconds parked_upstream_idle{4000};
  std::size_t max_header_bytes = 64 * 1024;  ///< 431 above this
  std::size_t max_body_bytes = 64 << 20;     ///< request body; 413 above this

  /// TLS inspection (rules with `tls: inspect`). Without a CA such CONNECTs are refused.
  std::shared_ptr<CertificateAuthority> ca;
  /// Extra PEM files trusted when verifying upstream servers (`--upstream-ca`), on top of
  /// the system trust store (unless upstream_system_trust is false).
  std::vector<std::string> upstream_ca_files;
  bool upstream_system_trust = true;
};

/// A stand-in token the sandbox may send instead of a secret (`inject.placeholder_env`). The
/// proxy swaps it for the secret's value only on requests decided by rule `rule_id`.
struct Placeholder {
  std::string env;      ///< the sandbox variable that holds the token
  std::string token;    ///< random, unguessable
  std::string secret;   ///< secret name
  std::string rule_id;  ///< the only rule whose requests get the real value
  /// false for the stand-ins of `inject.aws_sigv4` (AWS_ACCESS_KEY_ID & co.): never swapped
  /// into a request; the proxy checks the signature made with them and signs again (sigv4.hpp).
  bool swapped = true;
};

/// Who a listener serves. Every connection accepted on it is attributed to this execution and
/// decided by this matcher (its workflow's limits apply to the listener as a whole).
struct ListenerIdentity {
  ListenerIdentity() = default;
  ListenerIdentity(std::string execution, std::shared_ptr<const policy::Matcher> m,
                   std::shared_ptr<const policy::SecretStore> s = nullptr,
                   std::vector<Placeholder> p = {})
      : execution_id(std::move(execution)),
        matcher(std::move(m)),
        secrets(std::move(s)),
        placeholders(std::move(p)) {}

  std::string execution_id;  ///< "" for a standalone proxy
  std::shared_ptr<const policy::Matcher> matcher;
  /// Values for `${secret:NAME}` in inject headers; null = nothing can be injected (requests
  /// that need an injection are refused).
  std::shared_ptr<const policy::SecretStore> secrets;
  std::vector<Placeholder> placeholders;
  /// The execution's synthetic DNS names (transparent capture): a redirected connection to one
  /// of its addresses is decided by the name. Null: not a sandbox's listener, so no connection
  /// to it is taken for a redirected one (a DNAT in front of a shared proxy is not a redirect).
  std::shared_ptr<SyntheticNames> names;
  /// > 0 for a listener shared by many clients (standalone `sluice proxy`): the workflow's
  /// egress.limits apply to each client address (IPv6: each /64) separately, the request and
  /// byte budgets start again every window, refused requests do not spend max_requests, and a
  /// policy reload starts every budget again. 0: the limits are the listener's totals (one
  /// execution's). docs/proxy.md, "Standalone proxy: limits per client".
  std::chrono::seconds per_client_window{0};
  /// Where matches of `action: ask` rules wait for an approver (docs/approvals.md). Null: no
  /// one can answer, so they are refused at once with approval_unavailable.
  std::shared_ptr<ApprovalDesk> approvals;
  /// What approvers are shown about who asked: the session (sluice serve) and the caller.
  std::string session_id;
  std::string caller;
  /// A candidate policy decided alongside `matcher` (`--shadow-policy`): every connections,
  /// requests and DNS row records what it would have decided (PolicyStamp::shadow_decision),
  /// traffic is untouched. Null: none.
  std::shared_ptr<const policy::Matcher> shadow;
  /// Learn mode (`sluice run --learn`, docs/policy.md): what no rule explicitly refuses goes
  /// through and is recorded as would_deny (policy::Query::learn).
  bool learn = false;
};

/// Makes the placeholders of every rule of `workflow` that declares `inject.placeholder_env`
/// (fresh random tokens, 32 bytes of entropy each), and the AWS_ACCESS_KEY_ID (`AKIA` + 16
/// upper-case letters and digits), AWS_SECRET_ACCESS_KEY (40 characters) and, with a
/// session_token, AWS_SESSION_TOKEN stand-ins of a rule with `inject.aws_sigv4`.
std::vector<Placeholder> makePlaceholders(const policy::Workflow& workflow);

/// One refusal, for the receipt's network.denials; or one failure of the network, for
/// network.failures (then `rule` is the rule that allowed it). `method` and `path` are set
/// when a request was refused (empty for a connection).
struct Denial {
  std::string host;
  std::uint16_t port = 0;
  std::string rule;
  std::string reason;
  std::string method;
  std::string path;
};

/// A policy an execution ran under: its generation (1 at start, +1 per live update or reload),
/// the policy text's sha256 and when it came into force (ms since the epoch).
struct PolicyGeneration {
  std::uint64_t generation = 0;
  std::string policy_sha256;
  std::int64_t since_ms = 0;
};

/// Counters of one execution (all its listeners), for the receipt. allowed, denied and failed
/// count attempts, each once, as the audit rows do (docs/audit.md "What is counted"): every
/// request the proxy judged, and every connection it did not read as HTTP (a passthrough
/// tunnel, a refused or failed connection, a blocked packet).
struct Stats {
  std::uint64_t allowed = 0;      ///< attempts let through that reached their upstream
  std::uint64_t denied = 0;       ///< attempts refused (policy, guard, limits, checks)
  std::uint64_t failed = 0;       ///< attempts let through whose network failed
  std::uint64_t bytes_out = 0;    ///< client -> upstream
  std::uint64_t bytes_in = 0;     ///< upstream -> client
  std::uint64_t requests = 0;     ///< HTTP requests the proxy judged (requests rows)
  std::uint64_t connections = 0;  ///< connections the proxy was asked for (connections rows)
  std::vector<Denial> denials;    ///< first 1000 refusals, in order
  std::vector<Denial> failures;   ///< first 1000 failures, in order
  std::uint64_t dns_queries = 0;  ///< messages to sluice's DNS (every one, malformed too)
  std::uint64_t dns_denied = 0;   ///< of those, answered deny (NXDOMAIN, REFUSED, errors)
  std::uint64_t would_deny = 0;   ///< of `allowed`, let through only by learn mode
  std::vector<PolicyGeneration> policy_generations;  ///< in order, the first 1000
};

class Proxy {
 public:
  /// `sink` may be null (nothing audited); `resolver` null = the system resolver.
  static std::expected<std::unique_ptr<Proxy>, Error> create(ProxyOptions options,
                                                             std::shared_ptr<audit::EventSink> sink,
                                                             std::shared_ptr<Resolver> resolver);

  virtual ~Proxy();

  /// Binds and listens on addr:port (port 0 picks one); returns the bound port. May be called
  /// before or after start().
  virtual std::expected<std::uint16_t, Error> listen(const std::string& addr, std::uint16_t port,
                                                     ListenerIdentity identity) = 0;

  /// Accepts on an already bound and listening TCP socket (e.g. created inside a sandbox's
  /// network namespace). The proxy takes ownership of `fd` (closes it on error too).
  virtual std::expected<void, Error> adoptListener(int fd, ListenerIdentity identity) = 0;

  /// Serves sluice's DNS for one execution (DESIGN.md "Transparent capture and DNS") on an
  /// already bound UDP socket and an already listening TCP socket (made inside the sandbox's
  /// network namespace, 127.0.0.53:53); either may be -1, not both. Names an allow rule of
  /// `identity.matcher` could match get synthetic addresses from `identity.names` (required);
  /// every other name gets NXDOMAIN; nothing is forwarded; each query is an audit row and
  /// `egress.limits.max_dns_queries` bounds them. Takes ownership of both fds (closes them on
  /// error too). closeExecution() and stop() close them.
  virtual std::expected<void, Error> adoptDns(int udp_fd, int tcp_fd,
                                              ListenerIdentity identity) = 0;

  /// Records what the sandbox of `identity.execution_id` tried to send that its capture rules
  /// rejected (docs/sandbox.md "Blocked attempts"): `fd` is the runner's nfnetlink_log socket
  /// (runner::DnsCallback's third fd). One connections row per attempt (kind "blocked",
  /// reason protocol_not_allowed; the first 1000 of an execution, then one summary row a
  /// second with the count), each counted in the execution's denials. Call after the
  /// execution's listeners are adopted (their account is charged). Takes ownership of `fd`
  /// (closes it on error too). closeExecution() and stop() read what is left and close it.
  virtual std::expected<void, Error> adoptBlockedLog(int fd, ListenerIdentity identity) = 0;

  /// Stops accepting on every listener of `execution_id`, closes its open connections and
  /// waits (up to 2 s) until they have ended, so their audit rows are written and stats()
  /// is final on return, then frees the listener records: the final stats stay available
  /// for the 64 most recently closed executions. Not to be called from a proxy I/O thread.
  virtual void closeExecution(const std::string& execution_id) = 0;

  /// From now on, the audit rows (connections, requests, forwards, DNS, blocked attempts) of
  /// `owner`'s listeners name `execution_id` (a session's exec running in the session's
  /// sandbox, whose listeners carry the session's id); "" names `owner` again. Budgets and
  /// stats() stay the owner's. A row takes the name current when its connection or request
  /// began.
  virtual void setCurrentExecution(const std::string& owner, const std::string& execution_id) = 0;

  /// Swaps the matcher of every listener serving `workflow` (SIGHUP reload) as a new policy
  /// generation of each. Connections already established keep the decision they got; new
  /// decisions (each request, DNS query) use the new matcher.
  virtual void replaceMatcher(const std::string& workflow,
                              std::shared_ptr<const policy::Matcher> matcher) = 0;

  /// A live update of one execution's (or session's: its listeners carry its id) policy: records
  /// the text (audit `policies`), then swaps the policy of its listeners and DNS as one new
  /// generation, which it returns; later decisions and their rows use it. kNotFound when no
  /// listener serves `execution_id`.
  virtual std::expected<std::uint64_t, Error> replacePolicy(
      const std::string& execution_id, std::shared_ptr<const policy::Matcher> matcher) = 0;

  /// Runs the I/O threads (returns at once).
  virtual void start() = 0;

  /// Stops accepting, closes kept-alive connections that are between requests, lets the
  /// rest drain up to drain_timeout, closes what is left (their audit rows are written),
  /// joins the threads. Idempotent; also called by the destructor.
  virtual void stop() = 0;

  /// Counters of every listener of `execution_id`.
  virtual Stats stats(const std::string& execution_id) const = 0;

 protected:
  Proxy() = default;
};

}  // namespace sluice::proxy
