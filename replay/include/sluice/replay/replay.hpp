// `sluice policy replay`: every recorded connection, request and DNS query of a scope decided
// again by a candidate policy, through the proxy's own decision code (Matcher::decide,
// policy::decideTunnel, the SSRF guard on the recorded address), and compared with what was
// recorded. How each kind of row is compared: docs/policy.md, "Learn, review, replay".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/audit/event_sink.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/replay/history.hpp"

namespace sluice::replay {

/// A policy's verdict: the audit store's own (shadow_decision's), named by audit::textOf.
using Verdict = audit::Verdict;

/// One side of a comparison: the policy's verdict, the deciding rule and the reason.
struct Side {
  Verdict verdict = Verdict::kDeny;
  std::string rule;
  std::string reason;
};

/// One row the candidate decides differently.
struct Difference {
  std::string change;  // "allow->deny" | "deny->allow" | "ask" (to or from ask) | "rule"
  std::string kind;    // "connection" | "request" | "dns"
  std::int64_t seq = 0;
  std::string execution_id, connection_id;
  std::string method, host, path;  // method and path: requests only; host: the name for DNS
  std::uint16_t port = 0;
  Side before, after;
  std::string detail;        // the candidate's
  std::string nearest_miss;  // the candidate's, for a default deny
  std::string note;          // how the recorded side was had, when not from the row alone
};

struct ReplayCounts {
  std::uint64_t connections = 0, requests = 0, dns = 0;  // rows compared
  std::uint64_t unchanged = 0, allow_to_deny = 0, deny_to_allow = 0, ask_changes = 0,
                rule_changes = 0;
  std::uint64_t not_compared = 0;  // rows no policy decided (docs: what is not compared)
  std::uint64_t changed() const {
    return allow_to_deny + deny_to_allow + ask_changes + rule_changes;
  }
};

struct ReplayReport {
  std::vector<Difference> differences;  // in chain order within each kind
  ReplayCounts counts;
};

/// Replays `scope` of `history` against `candidate`.
base::Result<ReplayReport> replay(History& history, const Scope& scope,
                                  const policy::Matcher& candidate);

/// The report as text (one line per difference, then the counts) and as JSON
/// (schemas/replay.v1.schema.json).
std::string replayText(const ReplayReport& report);
std::string replayJson(const ReplayReport& report, const policy::Workflow& candidate);

}  // namespace sluice::replay
