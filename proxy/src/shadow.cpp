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

// The address a row records as dialled, else the one its refusal was decided at.
std::optional<policy::IpAddress> addressOf(const std::string& resolved_ip,
                                           const policy::IpAddress* refused_at) {
  if (!resolved_ip.empty())
    if (auto ip = policy::parseIpLiteral(resolved_ip)) return ip;
  if (refused_at) return *refused_at;
  return std::nullopt;
}

}  // namespace

void stampShadow(const policy::Matcher* shadow, audit::ConnectionEvent& ev,
                 const policy::IpAddress* refused_at) {
  if (!shadow) return;
  if (ev.kind == audit::ConnectionKind::kBlocked) {
    // Refused in the sandbox's netns before any policy is asked: no candidate can carry it.
    ev.stamp.shadow_decision = audit::Verdict::kDeny;
    return;
  }
  if (ev.host.empty()) return;  // refused before it named a target: nothing to decide
  auto target = policy::makeTarget(ev.host, ev.port);
  if (!target) {
    // A target no policy can allow (the live refusal said why).
    ev.stamp.shadow_decision = audit::Verdict::kDeny;
    return;
  }
  const auto at = addressOf(ev.resolved_ip, refused_at);
  const policy::IpAddress* addr = at ? &*at : nullptr;
  if (ev.kind == audit::ConnectionKind::kHttp) {
    stamp(ev.stamp, shadow->decide({*target, policy::Visibility::kPlainHttp, nullptr, addr}));
    return;
  }
  stamp(ev.stamp, policy::decideTunnelAt(*shadow, *target, addr));
}

void stampShadow(const policy::Matcher* shadow, audit::RequestEvent& ev,
                 const policy::IpAddress* at, bool plaintext) {
  if (!shadow || ev.host.empty()) return;
  auto target = policy::makeTarget(ev.host, ev.port);
  auto canon = policy::canonicalRequest(ev.method, ev.path);
  if (!target || !canon) {
    ev.stamp.shadow_decision = audit::Verdict::kDeny;  // refused before any policy decides
    return;
  }
  stamp(ev.stamp,
        shadow->decide({*target, policy::Visibility::kPlainHttp, &*canon, at, plaintext}));
}

void shadowOfRequest(audit::ConnectionEvent& ev, const audit::PolicyStamp& request) {
  if (ev.kind != audit::ConnectionKind::kHttp || ev.stamp.shadow_decision) return;
  ev.stamp.shadow_decision = request.shadow_decision;
  ev.stamp.shadow_rule = request.shadow_rule;
}

void stampShadow(const policy::Matcher* shadow, audit::DnsEvent& ev) {
  if (!shadow) return;
  const auto name = shadow->nameAnswer(ev.name);
  ev.stamp.shadow_decision = name.may_be_allowed ? audit::Verdict::kAllow : audit::Verdict::kDeny;
  ev.stamp.shadow_rule = name.rule ? name.rule->id : std::string();
}

}  // namespace sluice::proxy
