// The seam between producers (proxy, runner) and the audit store. Producers depend only on
// this header; tests substitute a fake. Secret *values* never travel through here, only names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::audit {

// The closed vocabularies of the event columns. Their stored text is given once, in
// event_text.hpp (audit rows, live streams and logs all take it from there).

/// Whether the policy (or an approver) let it through. Column `decision`. Events start as
/// kDeny (every producer sets it; one that forgot would not record an allow). kFail: the
/// policy let it through and the network failed (the name did not resolve, the upstream
/// refused, timed out or broke off, its TLS failed); `reason` says which (docs/audit.md
/// "What is counted"). kWouldDeny: a learning run (`sluice run --learn`) let through what the
/// policy would have denied (`reason` and `detail` say why, as for a denial). Connections and
/// requests only: DNS rows and approvals are allow|deny.
enum class Decision : std::uint8_t { kAllow, kDeny, kFail, kWouldDeny };

/// What a policy decides (the matcher's verdict, before the network or an approver has a say).
/// Column `shadow_decision`.
enum class Verdict : std::uint8_t { kAllow, kDeny, kAsk };

/// Which policy decided a connections, requests or dns_queries row, and what a shadow policy
/// said of it (columns policy_generation, shadow_decision, shadow_rule; all NULL when unset).
struct PolicyStamp {
  /// The generation of the policy that decided: 1 for the one a listener started with, one more
  /// per live update or reload. 0: not known (stored as NULL).
  std::uint64_t policy_generation = 0;
  /// The candidate's decision under `--shadow-policy` (nullopt: no shadow policy), and its rule
  /// (empty: none decided).
  std::optional<Verdict> shadow_decision;
  std::string shadow_rule;
};

/// How a connection came to the proxy. Column `connections.kind`.
enum class ConnectionKind : std::uint8_t {
  kConnect,      // a CONNECT tunnel
  kHttp,         // an origin connection for plain HTTP requests
  kTransparent,  // a redirected connection of a sandbox (transparent capture)
  kBlocked,      // a packet rejected in the sandbox's netns, recorded from the kernel's log
  kToken,        // the proxy's own request for a bearer token it mints (inject.oauth2, ...)
};

/// What the proxy did with a connection's TLS. Column `connections.tls`.
enum class TlsHandling : std::uint8_t { kNone, kPassthrough, kInspect };

/// How far an approver's answer reaches. Column `approvals.scope`.
enum class ApprovalScope : std::uint8_t {
  kOnce,       // this connection or request only
  kExecution,  // also later matches of the same rule, host, port and (a request's) method
  kHost,       // also later requests of any method to the same rule, host and port
};

// `reason` stays text: its vocabulary is policy::reasonName's (the enum lives in
// sluice::policy, which this interface-only target must not depend on), and DNS rows extend
// it (malformed_query, not_implemented) while an allowed approval has none ("").

/// One connection the proxy was asked for (CONNECT tunnel or origin connection for plain
/// HTTP), recorded once when it ends (or when it is refused).
struct ConnectionEvent {
  std::string id;            // unique (producer-generated, e.g. "c-<execution>-<n>")
  std::string execution_id;  // empty for a standalone proxy
  std::string workflow;
  std::string policy_sha256;
  std::int64_t ts_ms = 0;  // Unix epoch milliseconds when the connection was asked for
  ConnectionKind kind = ConnectionKind::kConnect;
  std::string host;  // target as asked (normalised)
  std::uint16_t port = 0;
  std::string resolved_ip;  // the vetted address dialled; empty if none
  Decision decision = Decision::kDeny;
  std::string rule_id;
  std::string reason;  // policy::reasonName vocabulary
  std::string detail;
  TlsHandling tls = TlsHandling::kNone;
  std::uint64_t bytes_up = 0;    // client -> upstream
  std::uint64_t bytes_down = 0;  // upstream -> client
  std::int64_t duration_ms = 0;
  PolicyStamp stamp;
};

/// One HTTP request the proxy saw (plain HTTP or inside an inspected tunnel).
struct RequestEvent {
  std::string connection_id;
  std::string execution_id;
  std::string workflow;
  std::int64_t ts_ms = 0;
  std::string method;
  std::string host;
  std::string path;
  /// The target's port, for live consumers (`sluice serve` streams); not a column (the
  /// request's connections row has it).
  std::uint16_t port = 0;
  int status = 0;  // status returned to the client (403 for a refusal)
  Decision decision = Decision::kDeny;
  std::string rule_id;
  std::string reason;
  std::vector<std::string> injected_secrets;  // secret NAMES only
  PolicyStamp stamp;
};

/// One request about to be sent upstream (write-ahead): recorded before its first byte leaves,
/// completed later by the exchange's RequestEvent (same connection_id, execution_id, ts,
/// method, host, path). Schema table `forwards`.
struct ForwardEvent {
  std::string connection_id;  // the upstream connection it is sent on
  std::string execution_id;
  std::string workflow;
  std::int64_t ts_ms = 0;  // the RequestEvent's ts_ms
  std::string method;
  std::string host;
  std::string path;
  std::string rule_id;
  int attempt = 1;  // 2 when resent on a fresh connection after a stale keep-alive
  std::vector<std::string> injected_secrets;  // secret NAMES only
};

/// The write-ahead row of request `r` (the fields the two share), sent as attempt `attempt`.
inline ForwardEvent forwardOf(const RequestEvent& r, int attempt = 1) {
  return {.connection_id = r.connection_id,
          .execution_id = r.execution_id,
          .workflow = r.workflow,
          .ts_ms = r.ts_ms,
          .method = r.method,
          .host = r.host,
          .path = r.path,
          .rule_id = r.rule_id,
          .attempt = attempt,
          .injected_secrets = r.injected_secrets};
}

/// One query sluice's DNS answered for a sandbox (DESIGN.md "Transparent capture and DNS").
/// Schema table `dns_queries`.
struct DnsEvent {
  std::string execution_id;
  std::string workflow;
  std::int64_t ts_ms = 0;
  std::string name;    // the question's name, lower-case, non-printable bytes as \DDD; may be empty
  std::string qtype;   // "A", "AAAA", "TXT", ... or "TYPE<n>"; empty when the query had none
  std::string answer;  // the synthetic address, or NXDOMAIN | NODATA | REFUSED | FORMERR | ...
  Decision decision = Decision::kDeny;
  std::string rule_id;  // empty: the DNS answer is not decided by one rule
  std::string reason;   // policy::reasonName vocabulary, or malformed_query | not_implemented
  PolicyStamp stamp;
};

/// One approval of an `ask` rule, recorded once when it is decided (answered, timed out, or
/// refused because its execution ended). Schema table `approvals`.
struct ApprovalEvent {
  std::string id;            // "ap-..." (the approval's id, as approvers saw it)
  std::string execution_id;  // empty for a standalone proxy
  std::string session_id;    // empty when not a session's
  std::string workflow;
  std::string caller;  // who the execution belongs to ("uid:N", a token name); may be empty
  std::string rule_id;
  std::string host;
  std::uint16_t port = 0;
  std::string method;  // empty (stored as NULL) for a tunnel
  std::string path;    // empty (stored as NULL) for a tunnel
  Decision decision = Decision::kDeny;
  std::string
      reason;  // "" when allowed; approval_denied | approval_timeout | execution_ended | ...
  ApprovalScope scope = ApprovalScope::kOnce;
  std::string decided_by;  // "uid:N", a token name, "approve-with", "mcp", "timeout", ...
  std::int64_t asked_at_ms = 0;
  std::int64_t decided_at_ms = 0;
};

/// Where producers send audit events. Implementations must be thread-safe. A call may block
/// (backpressure) but never drops an event.
class EventSink {
 public:
  virtual ~EventSink() = default;

  /// Records a policy text by its SHA-256 (stored once).
  virtual void recordPolicy(const std::string& sha256, const std::string& workflow,
                            const std::string& yaml_text) = 0;
  virtual void recordConnection(ConnectionEvent event) = 0;
  virtual void recordRequest(RequestEvent event) = 0;
  /// Called before a request's first byte goes upstream; may block (backpressure).
  virtual void recordForward(ForwardEvent event) = 0;
  /// One DNS query of a sandbox and its answer.
  virtual void recordDns(DnsEvent event) = 0;
  /// One decided approval (approvals table). The store implements it; test sinks that do not
  /// care may leave this default, which drops it.
  virtual void recordApproval(ApprovalEvent event) { (void)event; }

  /// False once the store has failed (disk full, I/O error): the proxy then refuses new
  /// connections rather than run unaudited (fail closed).
  virtual bool healthy() const = 0;
};

}  // namespace sluice::audit
