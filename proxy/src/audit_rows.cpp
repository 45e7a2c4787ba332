// Connection and request rows of the proxy (audit_rows.hpp).
#include "audit_rows.hpp"

#include "log.hpp"
#include "shadow.hpp"
#include "sluice/audit/event_text.hpp"
#include "sluice/base/clock.hpp"

namespace sluice::proxy {

audit::ConnectionEvent connectionRow(Context& ctx, const Listener& listener,
                                     const policy::Workflow& workflow, audit::ConnectionKind kind,
                                     std::uint64_t generation) {
  audit::ConnectionEvent ev;
  ev.id = ctx.newConnectionId(listener.execution_id);
  ev.execution_id = ctx.row_names->of(listener.execution_id);
  ev.workflow = workflow.name;
  ev.policy_sha256 = workflow.sha256;
  ev.stamp.policy_generation = generation;
  ev.ts_ms = base::nowMs();
  ev.kind = kind;
  ev.tls = kind == audit::ConnectionKind::kConnect ? audit::TlsHandling::kPassthrough
                                                   : audit::TlsHandling::kNone;
  return ev;
}

void allowConnection(audit::ConnectionEvent& ev, const tcp::endpoint& at,
                     const std::string& rule_id) {
  ev.resolved_ip = at.address().to_string();
  ev.decision = audit::Decision::kAllow;
  ev.rule_id = rule_id;
  ev.reason = std::string(policy::reasonName(policy::Reason::kAllowed));
}

void allowConnection(audit::ConnectionEvent& ev, const tcp::endpoint& at,
                     const policy::Decision& d) {
  allowConnection(ev, at, d.rule_id);
  if (d.learned) learnedRow(ev, d);
}

void learnedRow(audit::ConnectionEvent& ev, const policy::Decision& d) {
  ev.decision = audit::Decision::kWouldDeny;
  ev.rule_id = d.rule_id;
  ev.reason = std::string(policy::reasonName(d.reason));
  ev.detail = d.detail;
}

void denyConnection(audit::ConnectionEvent& ev, const Refusal& r) {
  const bool failed = !r.failure.empty();
  ev.decision = failed ? audit::Decision::kFail : audit::Decision::kDeny;
  ev.rule_id = r.rule;
  ev.reason = failed ? r.failure : std::string(r.reasonText());
  ev.detail = r.detail;
}

void endConnection(audit::ConnectionEvent& ev, policy::Reason reason, std::string detail) {
  ev.reason = std::string(policy::reasonName(reason));
  ev.detail = std::move(detail);
}

void recordConnectionRow(Context& ctx, Account& account, audit::ConnectionEvent ev) {
  if (!ev.stamp.shadow_decision) stampShadow(account.shadow.get(), ev);
  account.tally(ev);
  if (ctx.sink) ctx.sink->recordConnection(std::move(ev));
}

void recordDeniedConnection(Context& ctx, Account& account, audit::ConnectionEvent ev,
                            const Refusal& r) {
  denyConnection(ev, r);
  log().info("{} {} {}:{} rule={} reason={}: {}", audit::textOf(ev.decision),
             audit::textOf(ev.kind), ev.host, ev.port, r.rule.empty() ? "-" : r.rule, ev.reason,
             r.detail);
  if (!ev.stamp.shadow_decision)
    stampShadow(account.shadow.get(), ev, r.address ? &*r.address : nullptr);
  recordConnectionRow(ctx, account, std::move(ev));
}

void finishConnection(Context& ctx, Account& account, audit::ConnectionEvent& ev,
                      Clock::time_point started) {
  ev.duration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  recordConnectionRow(ctx, account, std::move(ev));
}

RequestRecord::RequestRecord(const Context& ctx, const Listener& listener, Account& account,
                             const policy::Workflow& workflow, std::string connection_id,
                             std::string method, std::string host, std::string path,
                             std::uint64_t generation)
    : ctx_(ctx), account_(account) {
  ev_.connection_id = std::move(connection_id);
  ev_.execution_id = ctx.row_names->of(listener.execution_id);
  ev_.workflow = workflow.name;
  ev_.ts_ms = base::nowMs();
  ev_.method = std::move(method);
  ev_.host = std::move(host);
  ev_.path = std::move(path);
  ev_.decision = audit::Decision::kDeny;
  ev_.stamp.policy_generation = generation;
}

RequestRecord::~RequestRecord() { finish(); }

void RequestRecord::decided(bool allowed, const std::string& rule, policy::Reason reason) {
  ev_.decision = allowed ? audit::Decision::kAllow : audit::Decision::kDeny;
  ev_.rule_id = rule;
  ev_.reason = std::string(policy::reasonName(reason));
}

void RequestRecord::decided(const policy::Decision& d) {
  decided(true, d.rule_id, policy::Reason::kAllowed);
  if (!d.learned) return;
  ev_.decision = audit::Decision::kWouldDeny;
  ev_.reason = std::string(policy::reasonName(d.reason));
}

void RequestRecord::injected(std::vector<std::string> secret_names) {
  ev_.injected_secrets = std::move(secret_names);
}

void RequestRecord::outcome(int status, policy::Reason reason) {
  ev_.status = status;
  ev_.reason = std::string(policy::reasonName(reason));
}

void RequestRecord::at(const std::string& resolved_ip, bool plaintext) {
  // Only a shadow policy decides at the address: no parse per request without one.
  if (!account_.shadow) return;
  at_ = resolved_ip.empty() ? std::nullopt : policy::parseIpLiteral(resolved_ip);
  plaintext_ = plaintext;
}

void RequestRecord::refused(const Refusal& r) {
  if (r.address) at_ = r.address;
  ev_.status = static_cast<int>(r.status);
  const bool failed = !r.failure.empty();
  ev_.decision = failed ? audit::Decision::kFail : audit::Decision::kDeny;
  ev_.reason = failed ? r.failure : std::string(r.reasonText());
}

void RequestRecord::forwarding() {
  if (!ctx_.sink) return;
  ctx_.sink->recordForward(audit::forwardOf(ev_, ++attempts_));
}

const audit::PolicyStamp& RequestRecord::shadow() {
  if (!ev_.stamp.shadow_decision)
    stampShadow(account_.shadow.get(), ev_, at_ ? &*at_ : nullptr, plaintext_);
  return ev_.stamp;
}

void RequestRecord::finish() {
  if (written_) return;
  written_ = true;
  shadow();
  account_.tally(ev_);
  if (ctx_.sink) ctx_.sink->recordRequest(std::move(ev_));
}

}  // namespace sluice::proxy
