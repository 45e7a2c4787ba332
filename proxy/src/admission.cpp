// The one admission (admission.hpp): each step is a function here, and admit() lists them in
// their order.
#include "admission.hpp"

#include "approval_wait.hpp"
#include "sluice/policy/tunnel.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;

// Step 1: an audit store that has failed refuses everything (fail closed, never unaudited).
std::optional<Refusal> auditHealth(const Context& ctx) {
  if (ctx.auditHealthy()) return std::nullopt;
  return refusal(Reason::kAuditUnavailable,
                 "the audit store has failed; refusing to run unaudited");
}

// Learn mode changes decisions here alone: every query of the admission (and of a reconnect)
// carries the listener's learn flag, and the matcher applies it (policy::Query::learn).
policy::Query queryFor(const ConnState& conn, const Candidate& c, policy::Visibility v,
                       const policy::IpAddress* at) {
  policy::Query q{c.target, v, c.request, at, c.plaintext};
  q.learn = conn.listener->learn;
  return q;
}

// The tunnel's decision. Only rules with methods/paths (and no tls: inspect) may allow its
// host and port: a tunnel that carries plain HTTP can be judged request by request, TLS cannot.
std::optional<Refusal> decideTunnel(const ConnState& conn, const Candidate& c, Admitted& a) {
  auto tunnel = policy::decideTunnel(*conn.matcher, c.target, conn.listener->learn);
  if (tunnel.tls_refused) a.http_only = denialRefusal(*tunnel.tls_refused);
  a.decision = std::move(tunnel.decision);
  const policy::Decision& d = a.decision;
  if (!d.allowed && !d.ask) return denialRefusal(d);
  if (d.tls == policy::TlsMode::kInspect && !conn.ctx->tls) {
    // Tunnelling blindly would skip the rule's method/path/injection conditions.
    return refusal(Reason::kInspectionRequired,
                   "rule " + d.rule_id +
                       " asks for tls: inspect, but this proxy has no CA (sluice proxy --ca-dir "
                       "DIR); refusing rather than tunnelling unseen",
                   d.rule_id);
  }
  return std::nullopt;
}

// The request's decision, with the vetted address of the connection it would reuse (a reused
// connection is judged like a fresh one), and what the decision needs of the request itself.
std::optional<Refusal> decideRequest(const ConnState& conn, const Candidate& c,
                                     const policy::IpAddress* reuse, Admitted& a) {
  a.decision = conn.matcher->decide(queryFor(conn, c, policy::Visibility::kPlainHttp, reuse));
  const policy::Decision& d = a.decision;
  if (!d.allowed && !d.ask) return denialRefusal(d);
  // RFC 9110 9.3: these methods define no meaning for a body, and an upstream that ignores one
  // reads it as the next request (a smuggling shape).
  if (c.body_on_bodyless && !(d.rule && d.rule->allow_get_body))
    return refusal(Reason::kBodyNotAllowed,
                   c.request->method +
                       " request with a body (an upstream that ignores it would read it as the "
                       "next request); a rule may set allow_get_body: true");
  return std::nullopt;
}

// Step 2: the policy's decision (an ask is answered at step 3).
std::optional<Refusal> decide(const ConnState& conn, const Candidate& c,
                              const policy::IpAddress* reuse, Admitted& a) {
  return c.request ? decideRequest(conn, c, reuse, a) : decideTunnel(conn, c, a);
}

// The refusal of what an approver let through and the policy `now` (a live update while it
// waited) refuses: reason policy_changed, the new policy's own refusal in its detail.
Refusal changedRefusal(const PolicySnapshot& now, const Refusal& r) {
  return refusal(Reason::kPolicyChanged,
                 "policy generation " + std::to_string(now.generation) +
                     " refuses what an approver let through (" + std::string(r.reasonText()) +
                     ": " + r.detail + ")",
                 r.rule);
}

// An ask decision turned into an allow by an approver's answer (`approval`: its detail).
policy::Decision granted(policy::Decision asked, std::string approval) {
  asked.ask = false;
  asked.allowed = true;
  asked.reason = Reason::kAllowed;
  asked.detail = std::move(approval);
  return asked;
}

// An approver's grant meets the policy in force when it comes, not the one the candidate
// arrived under: after a live update (or reload) meanwhile, the candidate is decided again.
// Refused now: policy_changed; asked still: the grant applies (to the rule that asks now);
// allowed outright: allowed by it.
std::optional<Refusal> applyGrant(ConnState& conn, const Candidate& c,
                                  const policy::IpAddress* reuse, const policy::Decision& grant,
                                  Admitted& a) {
  const PolicySnapshot now = conn.listener->policy();
  if (now.generation == conn.generation) {
    a.decision = grant;
    a.approval = grant.detail;
    return std::nullopt;
  }
  conn.adopt(now);  // the rows of what follows carry the generation that decided it
  Admitted again;
  if (auto r = decide(conn, c, reuse, again)) return changedRefusal(now, *r);
  a = std::move(again);
  if (!a.decision.ask) return std::nullopt;
  a.decision = granted(std::move(a.decision), grant.detail);
  a.approval = grant.detail;
  return std::nullopt;
}

// Step 3: an ask is held for an approver; the answer is applied by applyGrant.
net::awaitable<std::optional<Refusal>> ask(ConnState& conn, tcp::socket& client, const Candidate& c,
                                           const policy::IpAddress* reuse, Admitted& a) {
  const std::string* method = c.request ? &c.request->method : nullptr;
  const std::string* path = c.request ? &c.request->path : nullptr;
  auto answer = co_await awaitApproval(conn, a.decision, c.target, method, path, client);
  if (!answer) co_return std::move(answer.error());
  co_return applyGrant(conn, c, reuse, *answer, a);
}

// Step 4: the budget of what the connection is charged to. `counted`: whether an execution's
// request count (taken before the decision, see admit) was still within max_requests.
std::optional<Refusal> budget(ConnState& conn, const Candidate& c, bool counted) {
  const auto& limits = conn.workflow().limits;
  const bool per_client = conn.listener->clients != nullptr;
  if (c.request && !(per_client ? conn.account().countRequest(limits) : counted))
    return limitRefusal("workflow limit max_requests (" + std::to_string(limits.max_requests) +
                        ") reached" + (per_client ? " for this client" : ""));
  if (conn.account().bytesExhausted(limits))
    return limitRefusal("workflow byte budget (max_bytes_out/max_bytes_in) spent");
  return std::nullopt;
}

}  // namespace

net::awaitable<std::expected<Admitted, Refusal>> admit(ConnState& conn, tcp::socket& client,
                                                       const Candidate& c, Outlet& out) {
  if (auto r = auditHealth(*conn.ctx)) co_return std::unexpected(std::move(*r));
  // An execution's budget counts every request it makes, refused ones included; a shared
  // listener's client spends its budget only on requests let through (refusals cannot lock it
  // out). Either way a spent budget is refused at its own step.
  const bool counted = !c.request || conn.listener->clients != nullptr ||
                       conn.account().countRequest(conn.workflow().limits);
  std::expected<Admitted, Refusal> result;
  Admitted& a = *result;
  const policy::IpAddress* reuse = out.openTo(c.target);
  if (auto r = decide(conn, c, reuse, a)) co_return std::unexpected(std::move(*r));
  if (a.decision.ask)
    if (auto r = co_await ask(conn, client, c, reuse, a)) co_return std::unexpected(std::move(*r));
  if (auto r = budget(conn, c, counted)) co_return std::unexpected(std::move(*r));
  reuse = co_await out.take(c.target, reuse);  // a lent connection only now (link.hpp)
  if (reuse) co_return result;
  if (auto r = out.cannotDial(a.decision.rule_id)) co_return std::unexpected(std::move(*r));
  out.decided(a.decision);
  auto vis =
      c.request || a.http_only ? policy::Visibility::kPlainHttp : policy::Visibility::kTunnel;
  auto opened = co_await reconnect(conn, c, vis, a.decision.rule_id, !a.approval.empty(), out);
  if (!opened) co_return std::unexpected(std::move(opened.error()));
  a.decision = std::move(*opened);
  co_return result;
}

net::awaitable<std::expected<policy::Decision, Refusal>> reconnect(ConnState& conn,
                                                                   const Candidate& c,
                                                                   policy::Visibility vis,
                                                                   const std::string& rule_id,
                                                                   bool approved, Outlet& out) {
  const auto& limits = conn.workflow().limits;
  if (!conn.account().acquireConnection(limits))
    co_return std::unexpected(limitRefusal("workflow limit max_connections (" +
                                           std::to_string(limits.max_connections) +
                                           " concurrent) reached"));
  Slot slot(&conn.account());
  policy::Query q = queryFor(conn, c, vis, nullptr);
  // The approval was for exactly this rule: the address is vetted as allowed by it.
  if (approved) q.approved_rule = rule_id;
  auto vetted = co_await vetAddresses(conn.ctx, conn.matcher, q, rule_id);
  if (!vetted) co_return std::unexpected(std::move(vetted.error()));
  auto dialled = co_await out.dial(*vetted, c.target, rule_id);
  if (!dialled) co_return std::unexpected(std::move(dialled.error()));
  slot.release();  // the outlet holds it now
  co_return std::move(dialled->decision);
}

}  // namespace sluice::proxy
