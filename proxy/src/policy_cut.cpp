// Re-deciding open tunnels at a live policy update (policy_cut.hpp).
#include "policy_cut.hpp"

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

void markCut(audit::ConnectionEvent& row, const PolicySnapshot& p, std::string why) {
  row.reason = "policy_changed";
  row.detail = std::move(why);
  row.stamp.policy_generation = p.generation;
}

}  // namespace sluice::proxy
