// Re-deciding open tunnels at a live policy update (policy_cut.hpp).
#include "policy_cut.hpp"

#include "sluice/policy/request.hpp"
#include "sluice/policy/tunnel.hpp"

namespace sluice::proxy {

std::optional<std::string> tunnelRefusedBy(const PolicySnapshot& p,
                                           const audit::ConnectionEvent& row) {
  const std::string where = row.host + ":" + std::to_string(row.port);
  auto target = policy::makeTarget(row.host, row.port);
  if (!target)
    return "policy generation " + std::to_string(p.generation) + " cannot judge " + where;
  const auto t = policy::decideTunnel(*p.matcher, *target);
  const std::string head = "policy generation " + std::to_string(p.generation) + " ";
  if (!t.decision.allowed)
    return head + "refuses " + where + " (" + std::string(policy::reasonName(t.decision.reason)) +
           (t.decision.rule_id.empty() ? "" : ", rule " + t.decision.rule_id) + ")";
  if (row.tls == audit::TlsHandling::kNone) return std::nullopt;  // requests judged one by one
  if (t.tls_refused) return head + "allows only plain HTTP to " + where;
  if (row.tls == audit::TlsHandling::kPassthrough && t.decision.tls == policy::TlsMode::kInspect)
    return head + "inspects " + where + ": a passthrough tunnel would bypass it";
  return std::nullopt;
}

bool refusesAsked(const policy::Matcher& m, const Approval& a) {
  auto target = policy::makeTarget(a.host, a.port);
  if (!target) return true;
  if (!a.method) {
    const auto d = policy::decideTunnel(m, *target).decision;
    return !d.allowed && !d.ask;
  }
  auto canon = policy::canonicalRequest(*a.method, a.path.value_or("/"));
  if (!canon) return true;
  const auto d = m.decide(policy::Query{*target, policy::Visibility::kPlainHttp, &*canon});
  return !d.allowed && !d.ask;
}

void markCut(audit::ConnectionEvent& row, const PolicySnapshot& p, std::string why) {
  row.reason = "policy_changed";
  row.detail = std::move(why);
  row.stamp.policy_generation = p.generation;
}

}  // namespace sluice::proxy
