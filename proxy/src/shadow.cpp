// Shadow decisions of rows (shadow.hpp).
#include "shadow.hpp"

#include "sluice/policy/request.hpp"
#include "sluice/policy/tunnel.hpp"

namespace sluice::proxy {

audit::Verdict verdictOf(const policy::Decision& d) {
  return d.allowed ? audit::Verdict::kAllow : d.ask ? audit::Verdict::kAsk : audit::Verdict::kDeny;
}

namespace {

void stamp(audit::PolicyStamp& s, const policy::Decision& d) {
  s.shadow_decision = verdictOf(d);
  s.shadow_rule = d.rule_id;
}

}  // namespace

void stampShadow(const policy::Matcher* shadow, audit::ConnectionEvent& ev) {
  if (!shadow || ev.host.empty()) return;
  if (ev.kind != audit::ConnectionKind::kConnect && ev.kind != audit::ConnectionKind::kTransparent)
    return;
  auto target = policy::makeTarget(ev.host, ev.port);
  if (!target) {
    // A target no policy can allow (the live refusal said why).
    ev.stamp.shadow_decision = audit::Verdict::kDeny;
    return;
  }
  stamp(ev.stamp, policy::decideTunnel(*shadow, *target).decision);
}

void stampShadow(const policy::Matcher* shadow, audit::RequestEvent& ev) {
  if (!shadow || ev.host.empty()) return;
  auto target = policy::makeTarget(ev.host, ev.port);
  auto canon = policy::canonicalRequest(ev.method, ev.path);
  if (!target || !canon) {
    ev.stamp.shadow_decision = audit::Verdict::kDeny;  // refused before any policy decides
    return;
  }
  stamp(ev.stamp, shadow->decide({*target, policy::Visibility::kPlainHttp, &*canon}));
}

void stampShadow(const policy::Matcher* shadow, audit::DnsEvent& ev) {
  if (!shadow) return;
  const auto name = shadow->nameAnswer(ev.name);
  ev.stamp.shadow_decision = name.may_be_allowed ? audit::Verdict::kAllow : audit::Verdict::kDeny;
  ev.stamp.shadow_rule = name.rule ? name.rule->id : std::string();
}

}  // namespace sluice::proxy
