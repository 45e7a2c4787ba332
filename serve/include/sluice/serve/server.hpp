// `sluice serve`: one resident process holding the policies, the proxy, the audit store, the
// secrets, the CA and the runner, answering agents and platforms over HTTP/JSON on a Unix socket
// (callers identified by SO_PEERCRED) and on TCP listeners that require a bearer token. The
// contract (paths, fields, status codes) is DESIGN.md "sluice serve" and schemas/api.v1.yaml;
// the operator's guide is docs/serve.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <expected>
#include <memory>
#include <string>
#include <vector>

namespace sluice::runner {
class SandboxZygote;
}

namespace sluice::serve {

struct ServeOptions {
  std::string policy_dir;
  /// "unix:/path" or "HOST:PORT" (IPv6 as "[::1]:PORT"). Empty: unix:/run/sluice/sluice.sock.
  std::vector<std::string> listens;
  /// Listening sockets passed by systemd (takeSystemdSockets(), systemd.hpp), served besides
  /// `listens`; with any, there is no default listener.
  std::vector<int> inherited_listeners;
  std::string audit_db = "/var/lib/sluice/audit.db";
  /// Ed25519 private key (`--signing-key`): the audit store signs checkpoints with it.
  std::string signing_key;
  std::string secrets;
  std::string ca_dir;
  std::vector<std::string> upstream_cas;
  /// Lines `NAME TOKEN [approver] [metrics]`; required for any TCP listener.
  std::string token_file;
  std::size_t pool = 0;
  /// Admission (docs/serve.md "Quotas"): sessions open and executions running at once, in all
  /// and per caller (0: the default share, sharesFor() in quotas.hpp), and the longest `ttl` or
  /// `idle_timeout` a session may ask for. Refusals are 429 with Retry-After.
  std::size_t max_sessions = 64;
  std::size_t max_sessions_per_caller = 0;
  std::size_t max_runs = 64;
  std::size_t max_runs_per_caller = 0;
  std::chrono::milliseconds max_session_ttl{std::chrono::hours(24)};
  /// Connections open at once (503 above), and per peer address or Unix uid (429 above; 0:
  /// max_connections / 4). A request's header must be in within header_timeout.
  std::size_t max_connections = 512;
  std::size_t max_connections_per_peer = 0;
  std::chrono::milliseconds header_timeout{10000};
  /// Where uploads (PUT .../files/...) are spooled, unlinked, before they are copied into the
  /// session; empty: the system's temp directory (TMPDIR).
  std::string spool_dir;
  /// How long SIGTERM lets running executions finish before they are stopped.
  std::chrono::milliseconds drain{30000};
  /// Largest body of a run or exec (413 above; smaller JSON bodies have smaller limits, and
  /// uploads the session's disk limit: docs/serve.md "Limits").
  std::size_t max_body_bytes = 64u << 20;
  /// Uids (besides root) whose Unix-socket calls may answer approvals.
  std::vector<unsigned> approver_uids;
  /// Threads running the connections' I/O. One: every call's blocking work (runs, execs, file
  /// operations, receipts read back) is on worker threads, and with two the I/O threads handed
  /// each event to one another (a futex wake-up and a context switch per event).
  unsigned io_threads = 1;
  /// OpenTelemetry export (otlp.hpp): http://HOST:PORT[/PATH]; empty: none. The counters go
  /// every otlp_interval.
  std::string otlp_endpoint;
  std::string otlp_ca;  // https: PEM CAs to trust; empty: the system's
  std::chrono::milliseconds otlp_interval{10000};
  /// Forks every sandbox's namespace helper (runner::SandboxZygote::start(), called by `sluice
  /// serve` first thing); without one the daemon clones each sandbox's init from itself.
  std::shared_ptr<runner::SandboxZygote> zygote;
  /// `--shadow-policy-dir DIR`: DIR/NAME.yaml (a workflow named NAME) is decided alongside
  /// every execution of workflow NAME, recorded, never enforced (docs/policy.md "Shadow
  /// policy"); reloaded with the policies on SIGHUP. Empty: none.
  std::string shadow_policy_dir;
  /// `--allow-learn`: runs and sessions may ask for learn mode (`"learn": true`); without it
  /// they are refused with 403 learn_not_allowed.
  bool allow_learn = false;
};

/// The daemon. start() binds every listener and returns; the caller waits for signals and
/// calls reload() (SIGHUP) or drain() (SIGTERM).
class Server {
 public:
  static std::expected<std::unique_ptr<Server>, std::string> create(ServeOptions options);
  virtual ~Server();
  /// Binds the listeners and starts serving.
  virtual std::expected<void, std::string> start() = 0;
  /// Reloads the policy directory (all or nothing); the message says what was rejected.
  virtual std::expected<void, std::string> reload() = 0;
  /// Stops accepting new work (503 draining), lets executions finish up to the drain timeout,
  /// stops what is left, ends every session with its receipt, closes the listeners, flushes
  /// the audit store. Blocking; idempotent.
  virtual void drain() = 0;
  /// The bound endpoints, as "unix:/path" or "HOST:PORT" (a port 0 given is resolved).
  virtual std::vector<std::string> endpoints() const = 0;

 protected:
  Server() = default;
};

}  // namespace sluice::serve
