// A tunnel's connection phase (tunnel.hpp).
#include "sluice/policy/tunnel.hpp"

namespace sluice::policy {

TunnelDecision decideTunnel(const Matcher& matcher, const Target& target, bool learn) {
  TunnelDecision t;
  policy::Query q{target, Visibility::kTunnel, nullptr, nullptr};
  q.learn = learn;
  t.decision = matcher.decide(q);
  if (t.decision.allowed || t.decision.reason != Reason::kInspectionRequired) return t;
  // Only request rules cover it: plain HTTP in the tunnel can still be judged request by
  // request, TLS cannot.
  q.visibility = Visibility::kPlainHttp;
  auto plain = matcher.decide(q);
  if (!plain.allowed) return t;
  plain.request_rules = true;
  t.tls_refused = std::move(t.decision);
  t.decision = std::move(plain);
  return t;
}

Decision decideTunnelAt(const Matcher& matcher, const Target& target, const IpAddress* address,
                        bool learn) {
  auto tunnel = decideTunnel(matcher, target, learn);
  Decision d = std::move(tunnel.decision);
  if (!address || !(d.allowed || d.ask)) return d;
  Query q{target, tunnel.visibility(), nullptr, address, false};
  q.learn = learn;
  if (d.ask) q.approved_rule = d.rule_id;
  auto at = matcher.decide(q);
  return !at.allowed || !d.ask ? at : d;
}

}  // namespace sluice::policy
