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

/// The proxy's per-execution counters (filled by the caller from the proxy's stats).
struct NetworkSummary {
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t bytes_in = 0;
  struct Denial {
    std::string host;
    std::uint16_t port = 0;
    std::string rule;  // "" for a default deny
    std::string reason;
  };
  std::vector<Denial> denials;
  /// sluice's DNS (transparent capture): every query, and those answered deny.
  std::uint64_t dns_queries = 0;
  std::uint64_t dns_denied = 0;
};

/// What the runner does not know itself.
struct ReceiptContext {
  std::string workflow;
  std::string policy_sha256;
  std::string network_mode = "none";  // "none" | "proxy"
  NetworkSummary network;
};

/// The receipt as JSON. `hash` is the audit row's hash (null until the row is committed).
nlohmann::json buildReceipt(const RunSpec& spec, const RunResult& result, const ReceiptContext& ctx,
                            const std::optional<std::string>& hash = std::nullopt);

/// RFC 3339 UTC with milliseconds ("2026-01-02T03:04:05.678Z").
std::string formatTimestamp(std::chrono::system_clock::time_point t);

}  // namespace sluice::runner
