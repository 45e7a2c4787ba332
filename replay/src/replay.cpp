// `policy replay` (replay.hpp): each recorded row decided again by the candidate through the
// proxy's decision code, and by the recorded policy where the row alone does not say what the
// policy decided.
#include "sluice/replay/replay.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/tunnel.hpp"

namespace sluice::replay {

namespace {

using policy::Reason;
using Decide = std::function<policy::Decision(const policy::Matcher&)>;

using ReasonSet = std::set<std::string, std::less<>>;

ReasonSet namesOf(std::initializer_list<Reason> reasons) {
  ReasonSet names;
  for (Reason r : reasons) names.emplace(policy::reasonName(r));
  return names;
}

std::string nameOf(Reason r) { return std::string(policy::reasonName(r)); }

// Reasons the matcher (or the canonical form it judges) gives: the row's decision is the
// policy's, as recorded.
const ReasonSet kPolicyReasons =
    namesOf({Reason::kAllowed, Reason::kDeniedByRule, Reason::kNoMatchingRule,
             Reason::kPortNotAllowed, Reason::kMethodNotAllowed, Reason::kPathNotAllowed,
             Reason::kPrivateAddress, Reason::kAddressNotInCidrs, Reason::kIpLiteralNeedsCidrs,
             Reason::kInspectionRequired, Reason::kPlaintextCredentials, Reason::kInvalidTarget,
             Reason::kInvalidMethod, Reason::kAmbiguousTarget});
// An ask rule matched and a person (or the lack of one) answered.
const ReasonSet kApprovalReasons =
    namesOf({Reason::kApprovalRequired, Reason::kApprovalDenied, Reason::kApprovalTimeout,
             Reason::kApprovalUnavailable, Reason::kExecutionEnded});
// Denials at the address phase: the address is in the detail when the row has none.
const ReasonSet kAddressReasons = namesOf({Reason::kPrivateAddress, Reason::kAddressNotInCidrs});
// What sluice's DNS answers by the policy's name question (nameAnswer).
const ReasonSet kDnsPolicyReasons =
    namesOf({Reason::kAllowed, Reason::kDeniedByRule, Reason::kNoMatchingRule});

Side sideOf(const policy::Decision& d) {
  return {d.allowed ? Verdict::kAllow
          : d.ask   ? Verdict::kAsk
                    : Verdict::kDeny,
          d.rule_id, std::string(policy::reasonName(d.reason))};
}

// A deny's rule counts only when a deny rule decided it (a default deny names its nearest
// miss, which is not a decision).
bool sameRule(const Side& a, const Side& b) {
  if (a.verdict != Verdict::kDeny) return a.rule == b.rule;
  const std::string by_rule = nameOf(Reason::kDeniedByRule);
  if (a.reason != by_rule && b.reason != by_rule) return true;
  return a.rule == b.rule;
}

// The address a denial's detail names ("api.test resolves to 10.0.0.7, a private address"):
// the proxy refuses before dialling, so such rows carry no resolved_ip. The first word written
// as a dotted quad or with colons that parses as an address.
std::optional<policy::IpAddress> addressInDetail(std::string_view detail) {
  std::size_t i = 0;
  while (i < detail.size()) {
    const std::size_t end = std::min(detail.find_first_of(" ,;()", i), detail.size());
    std::string_view word = detail.substr(i, end - i);
    i = end + 1;
    const auto dots = std::count(word.begin(), word.end(), '.');
    const auto colons = std::count(word.begin(), word.end(), ':');
    if (dots != 3 && colons < 2) continue;
    if (auto ip = policy::parseIpLiteral(word)) return ip;
  }
  return std::nullopt;
}

// The address a row was decided at: the one dialled, else the one a denial at the address
// phase names, else the target's own (an IP literal); none for a refusal before resolving.
std::optional<policy::IpAddress> recordedAddress(const std::string& resolved_ip,
                                                 const std::string& reason,
                                                 const std::string& detail,
                                                 const policy::Target& target) {
  std::optional<policy::IpAddress> addr = policy::parseIpLiteral(resolved_ip);
  if (!addr && kAddressReasons.contains(reason)) addr = addressInDetail(detail);
  if (!addr) addr = target.ip;
  return addr;
}

// A request as admit() decides it: on its canonical form (a spelling the proxy refuses is a
// deny with that reason), at its connection's address.
policy::Decision decideRequestAt(const policy::Matcher& m, const policy::Target& t,
                                 const RequestRow& r, const policy::IpAddress* addr,
                                 bool plaintext) {
  auto canon = policy::canonicalRequest(r.method, r.path);
  if (!canon) {
    policy::Decision d;
    d.reason = canon.error().reason;
    d.detail = canon.error().detail;
    return d;
  }
  return m.decide({t, policy::Visibility::kPlainHttp, &*canon, addr, plaintext});
}

Difference identityOf(const char* kind, std::int64_t seq, const std::string& execution,
                      const std::string& connection) {
  Difference d;
  d.kind = kind;
  d.seq = seq;
  d.execution_id = execution;
  d.connection_id = connection;
  return d;
}

// What a request needs of its connection row.
struct ConnInfo {
  std::uint16_t port = 0;
  bool plaintext = true;
  std::string resolved_ip, detail, policy_sha256;
};

class Replayer {
 public:
  Replayer(History& h, const policy::Matcher& candidate) : history_(h), candidate_(candidate) {}
  base::Result<ReplayReport> run(const Scope& scope);

 private:
  void connection(const ConnectionRow& r, const Scope& scope);
  void request(const RequestRow& r);
  void dns(const DnsRow& r);
  std::string requestPolicy(const RequestRow& r, const ConnInfo& c);
  std::optional<Side> recorded(const std::string& decision, const std::string& rule,
                               const std::string& reason, const std::string& sha,
                               const Decide& decide, std::string& note);
  void compare(Difference diff, const Side& before, const policy::Decision& after);
  // A recorded policy, compiled once, with the ids of its ask rules.
  struct Recorded {
    std::shared_ptr<const policy::Matcher> matcher;
    std::set<std::string, std::less<>> ask_rules;
  };
  const Recorded& recordedPolicy(const std::string& sha);

  History& history_;
  const policy::Matcher& candidate_;
  ReplayReport report_;
  std::unordered_map<std::string, ConnInfo> conns_;
  std::unordered_map<std::string, std::string> generation_sha_;  // "execution#generation" -> sha
  std::unordered_map<std::string, std::string> execution_sha_;   // execution -> its policy
  std::map<std::string, Recorded, std::less<>> policies_;
  std::optional<base::Error> error_;
};

base::Result<ReplayReport> Replayer::run(const Scope& scope) {
  // Connections first: a request's port, TLS and address are its connection's, whose row is
  // written when the connection ends (after its requests).
  auto c =
      history_.eachConnection(scope, true, [&](const ConnectionRow& r) { connection(r, scope); });
  if (!c) return std::unexpected(c.error());
  auto q = history_.eachRequest(scope, [&](const RequestRow& r) { request(r); });
  if (!q) return std::unexpected(q.error());
  auto d = history_.eachDns(scope, [&](const DnsRow& r) { dns(r); });
  if (!d) return std::unexpected(d.error());
  if (error_) return std::unexpected(*error_);
  std::stable_sort(report_.differences.begin(), report_.differences.end(),
                   [](const Difference& a, const Difference& b) { return a.seq < b.seq; });
  return std::move(report_);
}

const Replayer::Recorded& Replayer::recordedPolicy(const std::string& sha) {
  auto it = policies_.find(sha);
  if (it != policies_.end()) return it->second;
  Recorded r;
  auto text = sha.empty() ? base::Result<std::optional<std::string>>() : history_.policyText(sha);
  if (!text) error_ = text.error();
  if (text && *text) {
    auto w = policy::parseWorkflow(**text, "policy " + sha.substr(0, 12));
    if (w) {
      for (const auto& rule : w->rules)
        if (rule.action == policy::Action::kAsk) r.ask_rules.insert(rule.id);
      r.matcher = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
    }
  }
  return policies_.emplace(sha, std::move(r)).first->second;
}

// What the recorded policy decided, from the row where it says so, else by deciding the row
// with the recorded policy (a refusal no policy makes: a limit, a leak, a broken request).
std::optional<Side> Replayer::recorded(const std::string& decision, const std::string& rule,
                                       const std::string& reason, const std::string& sha,
                                       const Decide& decide, std::string& note) {
  if (decision == "would_deny") {
    note = "learn mode: the recorded policy denied it and it went through";
    return Side{Verdict::kDeny, rule, reason};
  }
  if (decision == "allow" || decision == "fail") {
    const bool asked = recordedPolicy(sha).ask_rules.contains(rule);
    if (asked) note = "an approver allowed it";
    if (decision == "fail")
      note = "the policy let it through; then the network failed (" + reason + ")";
    return Side{asked ? Verdict::kAsk : Verdict::kAllow, rule, nameOf(Reason::kAllowed)};
  }
  if (kPolicyReasons.contains(reason)) return Side{Verdict::kDeny, rule, reason};
  if (kApprovalReasons.contains(reason)) {
    note = "an ask rule matched; the answer was " + reason;
    return Side{Verdict::kAsk, rule, reason};
  }
  const policy::Matcher* m = recordedPolicy(sha).matcher.get();
  if (!m) return std::nullopt;
  note = "refused by " + (reason.empty() ? std::string("the proxy") : reason) +
         " (not a policy decision): compared with the recorded policy's own verdict";
  return sideOf(decide(*m));
}

void Replayer::compare(Difference diff, const Side& before, const policy::Decision& d) {
  Side after = sideOf(d);
  auto& n = report_.counts;
  if (before.verdict == after.verdict) {
    if (sameRule(before, after)) {
      ++n.unchanged;
      return;
    }
    diff.change = "rule";
    ++n.rule_changes;
  } else if (before.verdict == Verdict::kAsk || after.verdict == Verdict::kAsk) {
    diff.change = "ask";
    ++n.ask_changes;
  } else {
    const bool denied = after.verdict == Verdict::kDeny;
    diff.change = denied ? "allow->deny" : "deny->allow";
    ++(denied ? n.allow_to_deny : n.deny_to_allow);
  }
  diff.before = before;
  diff.after = std::move(after);
  diff.detail = d.detail;
  diff.nearest_miss = d.nearest_miss;
  report_.differences.push_back(std::move(diff));
}

void Replayer::connection(const ConnectionRow& r, const Scope& scope) {
  const bool plaintext = r.kind == "http" || r.tls != "inspect";
  conns_[r.id] = ConnInfo{r.port, plaintext, r.resolved_ip, r.detail, r.policy_sha256};
  // A live update or reload changes an execution's policy between rows: which text each
  // generation was, as its connections rows say (a request names only its generation).
  if (r.policy_generation > 0)
    generation_sha_[r.execution_id + "#" + std::to_string(r.policy_generation)] = r.policy_sha256;
  if (scope.since_ms && r.ts_ms < *scope.since_ms) return;
  auto target = policy::makeTarget(r.host, r.port);
  // An origin connection for plain HTTP is opened for a request, whose row is compared; blocked
  // packets, the proxy's own token fetches and unparsable targets are no policy decision.
  if ((r.kind != "connect" && r.kind != "transparent") || !target) {
    ++report_.counts.not_compared;
    return;
  }
  const auto addr = recordedAddress(r.resolved_ip, r.reason, r.detail, *target);
  const policy::IpAddress* at = addr ? &*addr : nullptr;
  const Decide decide = [&](const policy::Matcher& m) {
    return policy::decideTunnelAt(m, *target, at);
  };
  Difference diff = identityOf("connection", r.seq, r.execution_id, r.id);
  diff.host = r.host;
  diff.port = r.port;
  auto before = recorded(r.decision, r.rule_id, r.reason, r.policy_sha256, decide, diff.note);
  if (!before) {
    ++report_.counts.not_compared;
    return;
  }
  ++report_.counts.connections;
  compare(std::move(diff), *before, decide(candidate_));
}

// The request's own generation's policy, else its connection's (a kept-alive connection
// opened under an earlier generation carries requests decided under a later one), else its
// execution's, looked up once per execution (rows with no policy_sha256 of their own).
std::string Replayer::requestPolicy(const RequestRow& r, const ConnInfo& c) {
  std::string sha = c.policy_sha256;
  if (r.policy_generation > 0) {
    auto g = generation_sha_.find(r.execution_id + "#" + std::to_string(r.policy_generation));
    if (g != generation_sha_.end()) sha = g->second;
  }
  if (!sha.empty() || r.execution_id.empty()) return sha;
  auto [it, fresh] = execution_sha_.try_emplace(r.execution_id);
  if (fresh) it->second = history_.executionPolicy(r.execution_id).value_or("");
  return it->second;
}

void Replayer::request(const RequestRow& r) {
  auto conn = conns_.find(r.connection_id);
  std::expected<policy::Target, std::string> target = std::unexpected("");
  if (conn != conns_.end()) target = policy::makeTarget(r.host, conn->second.port);
  if (!target) {  // no connection row on record (or a target that never parsed): no port
    ++report_.counts.not_compared;
    return;
  }
  const ConnInfo& c = conn->second;
  const auto addr = recordedAddress(c.resolved_ip, r.reason, c.detail, *target);
  const policy::IpAddress* at = addr ? &*addr : nullptr;
  const Decide decide = [&](const policy::Matcher& m) {
    return decideRequestAt(m, *target, r, at, c.plaintext);
  };
  const std::string sha = requestPolicy(r, c);
  Difference diff = identityOf("request", r.seq, r.execution_id, r.connection_id);
  diff.method = r.method;
  diff.host = r.host;
  diff.path = r.path;
  diff.port = c.port;
  auto before = recorded(r.decision, r.rule_id, r.reason, sha, decide, diff.note);
  if (!before) {
    ++report_.counts.not_compared;
    return;
  }
  ++report_.counts.requests;
  compare(std::move(diff), *before, decide(candidate_));
}

void Replayer::dns(const DnsRow& r) {
  // Only the name's answer is the policy's (nameAnswer); malformed, unsupported and over-limit
  // queries are answered before it.
  if (!kDnsPolicyReasons.contains(r.reason)) {
    ++report_.counts.not_compared;
    return;
  }
  ++report_.counts.dns;
  Side before{r.decision == "allow" ? Verdict::kAllow : Verdict::kDeny, r.rule_id, r.reason};
  auto answer = candidate_.nameAnswer(r.name);
  policy::Decision d;
  d.allowed = answer.may_be_allowed;
  if (answer.rule) d.rule_id = answer.rule->id;
  d.reason = d.allowed     ? Reason::kAllowed
             : answer.rule ? Reason::kDeniedByRule
                           : Reason::kNoMatchingRule;
  d.detail = d.allowed ? "the name may be allowed: answered with a synthetic address"
                       : "no allow rule can match this name: NXDOMAIN";
  Difference diff = identityOf("dns", r.seq, r.execution_id, "");
  diff.host = r.name;
  compare(std::move(diff), before, d);
}

}  // namespace

base::Result<ReplayReport> replay(History& history, const Scope& scope,
                                  const policy::Matcher& candidate) {
  return Replayer(history, candidate).run(scope);
}

}  // namespace sluice::replay
