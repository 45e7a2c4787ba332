// What sluice's DNS answers for one execution (DESIGN.md "Transparent capture and DNS"): a name
// an allow rule could match gets a synthetic A/AAAA address (remembered in the execution's
// SyntheticNames, so the connection that follows is decided by name); every other name gets
// NXDOMAIN; nothing is forwarded anywhere. No I/O here: dns_server.cpp carries the bytes, the
// fuzz target calls this directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "policy_snapshot.hpp"
#include "sluice/audit/event_sink.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/proxy/synthetic_names.hpp"

namespace sluice::proxy::dns {

enum class Transport : std::uint8_t { kUdp, kTcp };

struct Outcome {
  bool respond = true;                 // false: send nothing (a response, or no id to answer)
  std::vector<std::uint8_t> response;  // the DNS message (no TCP length prefix)
  bool record = true;                  // write `event` to the audit store
  /// The row for dns_queries (execution_id and ts are the caller's to fill).
  audit::DnsEvent event;
  std::string problem;  // why a query was malformed, for the log
};

class Answerer {
 public:
  Answerer(std::shared_ptr<const policy::Matcher> matcher, std::shared_ptr<SyntheticNames> names);

  /// Answers one message that arrived over `transport`. `audit_ok` false (the store failed):
  /// every query is REFUSED (fail closed, like the proxy's connections).
  Outcome answer(std::span<const std::uint8_t> message, Transport transport, bool audit_ok = true);

  /// A policy reload or live update: later queries are decided by `p` and their rows carry its
  /// generation (the query count is kept).
  void setPolicy(PolicySnapshot p);
  PolicySnapshot policy() const;
  std::shared_ptr<const policy::Matcher> matcher() const { return policy().matcher; }
  /// A shadow policy (its answers go into each row's PolicyStamp) and learn mode (a name no
  /// rule names is answered, recorded would_deny); set once, before the first query.
  void setShadowAndLearn(std::shared_ptr<const policy::Matcher> shadow, bool learn) {
    shadow_ = std::move(shadow);
    learn_ = learn;
  }
  std::uint64_t queries() const { return queries_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;
  PolicySnapshot policy_;
  std::shared_ptr<SyntheticNames> names_;
  std::shared_ptr<const policy::Matcher> shadow_;
  bool learn_ = false;
  std::atomic<std::uint64_t> queries_{0};
};

}  // namespace sluice::proxy::dns
