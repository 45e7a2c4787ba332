// awaitApproval (approval_wait.hpp).
#include "approval_wait.hpp"

#include <poll.h>

#include <chrono>
#include <memory>
#include <utility>

#include "log.hpp"

namespace sluice::proxy {

using policy::Reason;

namespace {

// The desk's outcome reasons are reason names (reason.hpp); anything else is a refusal.
Reason outcomeReason(const std::string& r) {
  for (Reason c : {Reason::kApprovalTimeout, Reason::kApprovalUnavailable, Reason::kExecutionEnded,
                   Reason::kClosed})
    if (r == policy::reasonName(c)) return c;
  return Reason::kApprovalDenied;
}

std::string outcomeText(Reason r, const std::string& rule, const std::string& what,
                        const std::string& by) {
  switch (r) {
    case Reason::kApprovalTimeout:
      return "no approver answered for " + what + " (rule " + rule + ") in time";
    case Reason::kApprovalUnavailable:
      return "rule " + rule + " asks an approver for " + what + ", and none can answer now";
    case Reason::kExecutionEnded:
      return "the execution ended while " + what + " waited for approval";
    case Reason::kClosed:
      return "the connection was closed while " + what + " waited for approval";
    default:
      return "an approver (" + by + ") refused " + what + " (rule " + rule + ")";
  }
}

// Watches a client while its approval waits: if it hangs up, the approval is withdrawn (the desk
// records it as closed). Everything runs on the connection's strand, as the wait does.
struct HangUpWatch {
  HangUpWatch(net::any_io_executor ex, int client_fd, std::shared_ptr<ApprovalDesk> approvals,
              std::string approval_id)
      : timer(std::move(ex)),
        fd(client_fd),
        desk(std::move(approvals)),
        id(std::move(approval_id)) {}
  net::steady_timer timer;
  int fd;  // the fd, not the socket: checked only until `stopped`, which the wait sets first
  std::shared_ptr<ApprovalDesk> desk;
  std::string id;
  bool stopped = false;
};

// Bytes waiting to be read (a pipelined request, a body, a TLS ClientHello sent early) keep the
// socket readable, so a hang-up behind them is looked for this often.
constexpr std::chrono::milliseconds kHangUpRecheck{100};

// The peer shut its side down, or the connection failed: POLLRDHUP says so even while unread
// bytes wait before the end. (A half-close counts: such a client would never read an answer
// it has not yet been sent a reason to wait for.)
bool hungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void recheckLater(const std::shared_ptr<HangUpWatch>& w) {
  w->timer.expires_after(kHangUpRecheck);
  w->timer.async_wait([w](ErrorCode ec) {
    if (ec || w->stopped) return;
    if (hungUp(w->fd)) {
      w->desk->cancel(w->id);
      return;
    }
    recheckLater(w);
  });
}

}  // namespace

net::awaitable<std::expected<policy::Decision, Refusal>> awaitApproval(
    ConnState& conn, const policy::Decision& d, const policy::Target& target,
    const std::string* method, const std::string* path, tcp::socket& client) {
  const Listener& l = *conn.listener;
  const std::string what = (method ? *method + " " : std::string()) + target.authority() +
                           (path ? *path : std::string());
  if (!l.approvals) {
    co_return std::unexpected(refusal(
        Reason::kApprovalUnavailable,
        "rule " + d.rule_id + " asks an approver for " + what +
            ", and no one can answer approvals here (use sluice serve, sluice run --approve-with "
            "or sluice mcp)",
        d.rule_id));
  }
  Approval a;
  a.execution_id = l.execution_id;
  a.session_id = l.session_id;
  a.workflow = conn.workflow().name;
  a.caller = l.caller;
  a.rule = d.rule_id;
  a.host = target.host;
  a.port = target.port;
  if (method) a.method = *method;
  if (path) a.path = *path;
  const auto timeout = d.rule ? d.rule->ask_timeout : policy::Rule{}.ask_timeout;
  auto desk = l.approvals;
  auto ex = co_await net::this_coro::executor;
  std::shared_ptr<HangUpWatch> watch;
  ApprovalOutcome outcome =
      co_await net::async_initiate<decltype(net::use_awaitable), void(ApprovalOutcome)>(
          [&](auto handler) {
            using Handler = std::decay_t<decltype(handler)>;
            auto h = std::make_shared<Handler>(std::move(handler));
            // The desk answers on its own thread (or an approver's): resume on ours.
            auto raised = desk->ask(a, timeout, [h, ex](ApprovalOutcome o) {
              net::post(ex, [h, o = std::move(o)]() mutable { (*h)(std::move(o)); });
            });
            conn.pending_approval = raised.id;
            // A client that hangs up while it waits withdraws its approval: no approver should
            // allow, and no row record as allowed, a connection nobody waits for. Bytes it
            // sends meanwhile are left unread (they are the next request, or the tunnel's), and
            // a hang-up behind them is looked for every kHangUpRecheck.
            watch = std::make_shared<HangUpWatch>(client.get_executor(), client.native_handle(),
                                                  desk, raised.id);
            client.async_wait(tcp::socket::wait_read, [watch](ErrorCode ec) {
              if (ec || watch->stopped) return;  // cancelled: the approval was decided first
              if (hungUp(watch->fd))
                watch->desk->cancel(watch->id);
              else
                recheckLater(watch);
            });
            log().info("approval {} pending: {} (rule {}, workflow {})", raised.id, what, d.rule_id,
                       a.workflow);
          },
          net::use_awaitable);
  const std::string id = std::exchange(conn.pending_approval, std::string());
  if (watch) {  // the hang-up watch, if it still waits
    watch->stopped = true;
    watch->timer.cancel();
    ErrorCode ignored;
    client.cancel(ignored);
  }
  if (!outcome.allowed) {
    log().info("approval {} refused: {} ({})", id, what, outcome.reason);
    const Reason why = outcomeReason(outcome.reason);
    co_return std::unexpected(
        refusal(why, outcomeText(why, d.rule_id, what, outcome.decided_by), d.rule_id));
  }
  policy::Decision allowed = d;
  allowed.ask = false;
  allowed.allowed = true;
  allowed.reason = Reason::kAllowed;
  allowed.detail = "rule " + d.rule_id + " allows " + what + " (approved by " + outcome.decided_by +
                   ", " + id + ")";
  co_return allowed;
}

void withdrawApproval(ConnState& conn) {
  if (conn.pending_approval.empty() || !conn.listener || !conn.listener->approvals) return;
  conn.listener->approvals->cancel(conn.pending_approval);
}

}  // namespace sluice::proxy
