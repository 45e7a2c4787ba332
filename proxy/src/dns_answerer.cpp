// Answerer (dns_answerer.hpp): parse, count against max_dns_queries, decide, build the answer
// and its audit row.
#include "dns_answerer.hpp"

#include "dns_message.hpp"
#include "shadow.hpp"

namespace sluice::proxy::dns {
namespace {

// Meta and zone-transfer query types: nothing for a stub resolver to get from us.
bool unsupportedType(std::uint16_t t) { return t == 251 || t == 252 || t == 253 || t == 254; }

}  // namespace

Answerer::Answerer(std::shared_ptr<const policy::Matcher> matcher,
                   std::shared_ptr<SyntheticNames> names)
    : policy_{std::move(matcher), 1}, names_(std::move(names)) {}

void Answerer::setPolicy(PolicySnapshot p) {
  std::lock_guard lock(mu_);
  policy_ = std::move(p);
}

PolicySnapshot Answerer::policy() const {
  std::lock_guard lock(mu_);
  return policy_;
}

Outcome Answerer::answer(std::span<const std::uint8_t> message, Transport transport,
                         bool audit_ok) {
  Outcome out;
  const PolicySnapshot snapshot = policy();
  const auto& m = snapshot.matcher;
  out.event.stamp.policy_generation = snapshot.generation;
  Parsed p = parseQuery(message);
  const Query& q = p.query;
  if (q.question) {
    out.event.name = q.question->name;
    out.event.qtype = qtypeName(q.question->type);
  }
  out.event.workflow = m->workflow().name;  // the policy that decided, even across a reload
  out.event.decision = audit::Decision::kDeny;
  out.problem = p.problem;
  const std::size_t limit =
      transport == Transport::kTcp
          ? 65535
          : (q.edns ? std::min<std::size_t>(q.udp_payload, kUdpEdnsLimit) : kUdpPlainLimit);
  auto finish = [&](Rcode rc, std::string reason,
                    const std::optional<policy::IpAddress>& addr = std::nullopt) {
    out.response = buildResponse(q, rc, addr, limit);
    out.event.reason = std::move(reason);
    if (out.event.answer.empty()) out.event.answer = addr ? addr->str() : rcodeName(rc);
    return std::move(out);
  };

  // Every message counts, malformed or not: the limit bounds what the sandbox can make us do.
  // Past it, rows are still written for as many again, then only counted (a flood must not
  // grow the audit store without end).
  const std::uint64_t n = queries_.fetch_add(1, std::memory_order_relaxed) + 1;
  const std::uint64_t max = m->workflow().limits.max_dns_queries;
  if (n > max) out.record = n - max <= max;  // (not 2 * max: that can overflow)
  if (p.drop) {
    out.respond = false;
    out.event.answer = "dropped";
    out.event.reason = "malformed_query";
    return out;
  }
  if (n > max) return finish(Rcode::kRefused, "limit_exceeded");
  if (!audit_ok) return finish(Rcode::kRefused, "audit_unavailable");
  if (transport == Transport::kUdp && !q.edns && message.size() > kUdpPlainLimit) {
    out.problem = "UDP query larger than 512 bytes without EDNS";
    return finish(Rcode::kFormErr, "malformed_query");
  }
  if (p.error == Rcode::kNotImp) return finish(Rcode::kNotImp, "not_implemented");
  if (p.error != Rcode::kNoError) return finish(p.error, "malformed_query");
  if (q.edns && q.edns_version != 0) return finish(Rcode::kBadVers, "not_implemented");
  const Question& question = *q.question;
  if (question.type == kTypeOpt) {
    out.problem = "OPT as a question type";
    return finish(Rcode::kFormErr, "malformed_query");
  }
  if (question.klass != kClassIn) return finish(Rcode::kRefused, "not_implemented");
  if (unsupportedType(question.type)) return finish(Rcode::kNotImp, "not_implemented");
  if (!question.plain) return finish(Rcode::kNxDomain, "no_matching_rule");
  // The rule behind the answer: the allow (or ask) rule that made the name answerable, or the
  // deny rule that kept it out.
  const auto name = m->nameAnswer(question.name, learn_);
  stampShadow(shadow_.get(), out.event);
  if (name.rule != nullptr) out.event.rule_id = name.rule->id;
  if (!name.may_be_allowed)
    return finish(Rcode::kNxDomain, name.rule != nullptr ? "denied_by_rule" : "no_matching_rule");

  out.event.decision = name.learned ? audit::Decision::kWouldDeny : audit::Decision::kAllow;
  const std::string answered = name.learned ? "no_matching_rule" : "allowed";
  if (question.type != kTypeA && question.type != kTypeAAAA) {
    out.event.answer = "NODATA";  // the name exists; it has no record of this type
    return finish(Rcode::kNoError, answered);
  }
  auto addr = question.type == kTypeA ? names_->v4For(question.name) : names_->v6For(question.name);
  if (!addr) {
    out.event.decision = audit::Decision::kDeny;
    out.problem = "the execution's synthetic address range is used up";
    return finish(Rcode::kServFail, "limit_exceeded");
  }
  return finish(Rcode::kNoError, answered, addr);
}

}  // namespace sluice::proxy::dns
