// Re-deciding open tunnels at a live policy update (policy_cut.hpp).
#include "policy_cut.hpp"

#include "sluice/policy/request.hpp"
#include "sluice/policy/tunnel.hpp"

namespace sluice::proxy {

namespace {

std::string why(const policy::Decision& d) {
  return " (" + std::string(policy::reasonName(d.reason)) +
         (d.rule_id.empty() ? "" : ", rule " + d.rule_id) + ")";
}

// The admission's address step (the SSRF guard, the rule's cidrs; upstream_dial.cpp) for the
// address the tunnel connected to: a new cidr deny or a dropped allow_private cuts it too.
std::optional<std::string> addressRefused(const PolicySnapshot& p, const policy::Target& target,
                                          const policy::TunnelDecision& t,
                                          const audit::ConnectionEvent& row, bool granted) {
  auto ip = policy::parseIpLiteral(row.resolved_ip);
  if (!ip) return "cannot judge the address '" + row.resolved_ip + "' it connected to";
  const auto vis = t.tls_refused ? policy::Visibility::kPlainHttp : policy::Visibility::kTunnel;
  policy::Query q{target, vis, nullptr, &*ip};
  if (granted) q.approved_rule = row.rule_id;  // as the admission vetted it
  q.learn = p.learn;
  const auto d = p.matcher->decide(q);
  if (d.allowed) return std::nullopt;
  return "refuses " + target.authority() + " at " + ip->str() + why(d);
}

AskedVerdict verdictOf(const policy::Decision& d) {
  if (d.ask) return AskedVerdict::kAsks;
  return d.allowed ? AskedVerdict::kAllows : AskedVerdict::kRefuses;
}

}  // namespace

std::optional<std::string> tunnelRefusedBy(const PolicySnapshot& p,
                                           const audit::ConnectionEvent& row) {
  const std::string where = row.host + ":" + std::to_string(row.port);
  const std::string head = "policy generation " + std::to_string(p.generation) + " ";
  auto target = policy::makeTarget(row.host, row.port);
  if (!target) return head + "cannot judge " + where;
  const auto t = policy::decideTunnel(*p.matcher, *target, p.learn);
  // A tunnel an approver let through by the rule that still asks keeps its grant.
  const bool granted = t.decision.ask && t.decision.rule_id == row.rule_id;
  if (!t.decision.allowed && !granted) return head + "refuses " + where + why(t.decision);
  if (auto refused = addressRefused(p, *target, t, row, granted)) return head + *refused;
  if (row.tls == audit::TlsHandling::kNone) return std::nullopt;  // requests judged one by one
  if (t.tls_refused) return head + "allows only plain HTTP to " + where;
  if (row.tls == audit::TlsHandling::kPassthrough && t.decision.tls == policy::TlsMode::kInspect)
    return head + "inspects " + where + ": a passthrough tunnel would bypass it";
  return std::nullopt;
}

AskedVerdict decideAsked(const PolicySnapshot& p, const Approval& a) {
  auto target = policy::makeTarget(a.host, a.port);
  if (!target) return AskedVerdict::kRefuses;
  if (!a.method) return verdictOf(policy::decideTunnel(*p.matcher, *target, p.learn).decision);
  auto canon = policy::canonicalRequest(*a.method, a.path.value_or("/"));
  if (!canon) return AskedVerdict::kRefuses;
  policy::Query q{*target, policy::Visibility::kPlainHttp, &*canon};
  q.learn = p.learn;
  return verdictOf(p.matcher->decide(q));
}

void markCut(audit::ConnectionEvent& row, const PolicySnapshot& p, std::string why) {
  row.reason = "policy_changed";
  row.detail = std::move(why);
  row.stamp.policy_generation = p.generation;
}

}  // namespace sluice::proxy
