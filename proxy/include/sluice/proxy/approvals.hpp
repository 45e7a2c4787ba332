// Approvals (`action: ask`, DESIGN.md "Policy"): a connection or request that an ask rule
// matched waits, without blocking anything else, until an approver answers or its timeout
// passes. The desk holds the pending approvals of one process (sluice run, proxy, serve, mcp),
// remembers `scope: execution` / `scope: host` answers (grants), writes one `approvals` audit row
// per approval when it is decided, and tells watchers (the exec's NDJSON stream, `--approve-with`,
// MCP elicitation) about each new one. Reference: docs/approvals.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/audit/event_sink.hpp"

namespace sluice::proxy {

/// One approval as approvers see it (DESIGN.md: `id, execution_id, session_id, workflow, caller,
/// rule, host, port, method, path, asked_at, expires_at`; method/path null for a tunnel).
struct Approval {
  std::string id;            ///< "ap-" + 16 hex digits
  std::string execution_id;  ///< the listener's execution ("" for a standalone proxy)
  std::string session_id;    ///< "" when not a session's
  std::string workflow;
  std::string caller;  ///< "" when not known (sluice run: the local user)
  std::string rule;
  std::string host;
  std::uint16_t port = 0;
  std::optional<std::string> method;  ///< null for a tunnel (CONNECT, transparent)
  std::optional<std::string> path;
  std::int64_t asked_at_ms = 0;  ///< Unix epoch milliseconds
  std::int64_t expires_at_ms = 0;
};

/// How far an answer reaches: kOnce, kExecution or kHost. The approvals row's own enum, so an
/// answer's scope is recorded as it was given.
using Scope = audit::ApprovalScope;

/// "once" | "execution" | "host" (the approvals row's text, audit::textOf).
std::string_view scopeName(Scope s);
/// The scope named `name`; nullopt for anything else.
std::optional<Scope> parseScope(std::string_view name);

/// What each scope's answer to `a` would allow, one line each, as approvers are shown it
/// (the approval JSON's `covers`). For a request, `execution` keeps its method and `host`
/// widens to every method; for a tunnel (no method) both cover the host and port.
struct ScopeCovers {
  std::string once;
  std::string execution;
  std::string host;
};
ScopeCovers scopeCovers(const Approval& a);

/// `s` made safe for a person's screen: every byte outside printable ASCII (ESC, CR, LF, DEL,
/// bytes of UTF-8 or not) becomes `\xNN` and a backslash `\\`, so nothing the sandboxed code
/// sent can move a cursor, rewrite a line or wrap; then, when longer than `max` characters
/// (0 = no cut), cut to `max` with the last three replaced by "...".
std::string displayText(std::string_view s, std::size_t max = 0);

/// The approval as JSON text (the fields above, and `covers`: {once, execution, host} from
/// scopeCovers; times as RFC 3339 UTC strings).
std::string approvalJson(const Approval& a);

/// How an approval ended, for the waiting connection.
struct ApprovalOutcome {
  bool allowed = false;
  /// "" when allowed; else approval_denied | approval_timeout | approval_unavailable (no one can
  /// answer) | execution_ended.
  std::string reason;
  std::string decided_by;  ///< "uid:N", a token name, "approve-with", "mcp", "timeout", ...
};

/// What answering an approval came to (for the API's status codes).
enum class AnswerStatus : std::uint8_t {
  kAnswered,  ///< 200
  kNotFound,  ///< 404: no such approval (or not the caller's to see)
  kGone,      ///< 409: already decided, timed out, or its execution ended
};

/// Who approvers are told an approval belongs to (ApprovalDesk::attribute).
struct Attribution {
  std::string execution_id;  ///< the execution running now ("" = the owner id itself)
  std::string session_id;
  std::string caller;
};

class ApprovalDesk {
 public:
  /// `sink` gets one ApprovalEvent per approval when it is decided (may be null: none).
  explicit ApprovalDesk(std::shared_ptr<audit::EventSink> sink);
  ~ApprovalDesk();
  ApprovalDesk(const ApprovalDesk&) = delete;
  ApprovalDesk& operator=(const ApprovalDesk&) = delete;

  /// Raises `a` (its id, asked_at and expires_at are filled in here; expires after `timeout`)
  /// and calls `done` exactly once, on any thread, never inside ask(): at once (posted to a
  /// desk thread) when a remembered grant covers it, else when it is answered, times
  /// out or its execution ends. Returns the approval as raised.
  Approval ask(Approval a, std::chrono::milliseconds timeout,
               std::function<void(ApprovalOutcome)> done);

  /// Answers a pending approval. `decided_by` names the approver for the audit row. With
  /// Scope::kExecution or kHost the answer is remembered as a grant (what scopeCovers says it
  /// covers), and also decides at once every other approval of the same owner pending now
  /// that it covers, each with its own row naming the grant. When several remembered grants
  /// cover a later match, the latest answer decides.
  AnswerStatus answer(const std::string& id, bool allow, Scope scope,
                      const std::string& decided_by);

  /// Withdraws a pending approval because its connection went away (closed, proxy stopping):
  /// its waiter is told (reason closed) and its row says so. No-op when already decided.
  void cancel(const std::string& id);

  /// Pending approvals, oldest first.
  std::vector<Approval> pending() const;
  std::optional<Approval> find(const std::string& id) const;

  /// Called with each new approval (not for those a remembered answer covered). `execution_id`
  /// "" = every execution. Returns a handle for unwatch(). Called on the asking thread: do not
  /// block in it (spawn, post, or answer later).
  using Watcher = std::function<void(const Approval&)>;
  std::uint64_t watch(const std::string& execution_id, Watcher fn);
  void unwatch(std::uint64_t handle);

  /// Ends `execution_id` (an owner id, or the execution an attribution named): its pending
  /// approvals are refused with execution_ended; for an owner, its remembered answers and
  /// attribution are forgotten and later asks refused at once. Answers after that get kGone.
  void endExecution(const std::string& execution_id);

  /// Approvals raised by the listener of `owner` (the proxy's execution id: a run's, or a
  /// session's) are shown and recorded with `a` (a session's current exec, its caller): the
  /// listener is made before they are known (warm pool, sessions). Replaces an earlier call.
  /// Remembered answers and watchers still key on `owner` (and on a.execution_id).
  void attribute(const std::string& owner, Attribution a);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::proxy
