// The execution receipt (DESIGN.md "Receipt", schemas/receipt.v1.schema.json): what ran, under
// which policy and limits, what it printed and produced, what it reached, how it was isolated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {

/// The proxy's per-execution counters (filled by the caller from the proxy's stats). The
/// definitions are docs/audit.md "What is counted": allowed, denied and failed count attempts
/// (each request the proxy judged, each connection it did not read as HTTP), as the audit
/// rows of the execution do; connections and requests count those rows.
struct NetworkSummary {
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t failed = 0;
  std::uint64_t connections = 0;
  std::uint64_t requests = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t bytes_in = 0;
  /// A refusal (denials) or a failure of the network (failures: `rule` is the rule that let
  /// it through). `method` and `path` are set for a request, empty for a connection.
  struct Denial {
    std::string host;
    std::uint16_t port = 0;
    std::string rule;  // "" for a default deny
    std::string reason;
    std::string method;
    std::string path;
  };
  std::vector<Denial> denials;
  std::vector<Denial> failures;
  /// sluice's DNS (transparent capture): every query, and those answered deny.
  std::uint64_t dns_queries = 0;
  std::uint64_t dns_denied = 0;
  /// Of `allowed`, what learn mode let through that the policy denies (would_deny rows).
  std::uint64_t would_deny = 0;
};

/// The receipt's `network` object for `mode` ("none" | "proxy"); sessions' summaries use it
/// too, so every surface states the same counts.
nlohmann::json networkJson(const NetworkSummary& n, const std::string& mode);

/// A policy generation the execution ran under (a live update or reload makes a new one).
struct PolicyGenerationSeen {
  std::uint64_t generation = 0;
  std::string policy_sha256;
  std::int64_t since_ms = 0;  // when it came into force, ms since the epoch
};

/// What the runner does not know itself.
struct ReceiptContext {
  std::string workflow;
  std::string policy_sha256;
  std::string network_mode = "none";  // "none" | "proxy"
  NetworkSummary network;
  /// A learn-mode run (`sluice run --learn`): the receipt says `mode: "learn"` and counts
  /// network.would_deny.
  bool learn = false;
  /// The receipt's optional policy_generations (absent when empty: no proxy).
  std::vector<PolicyGenerationSeen> policy_generations;
};

/// The receipt as JSON. `hash` is the audit row's hash (null until the row is committed).
nlohmann::json buildReceipt(const RunSpec& spec, const RunResult& result, const ReceiptContext& ctx,
                            const std::optional<std::string>& hash = std::nullopt);

/// RFC 3339 UTC with milliseconds ("2026-01-02T03:04:05.678Z").
std::string formatTimestamp(std::chrono::system_clock::time_point t);

}  // namespace sluice::runner
