// Recorded traffic, read back from an audit store for `policy replay` and `policy learn`: the
// connections, requests and DNS queries of a scope, streamed in chain order, and the policy
// texts that decided them. Read-only (audit::Reader).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/audit/reader.hpp"
#include "sluice/base/error.hpp"

namespace sluice::replay {

/// Which rows: every filter set must hold (executions: any of them).
struct Scope {
  std::vector<std::string> executions;
  std::optional<std::int64_t> since_ms;  // rows at or after
  std::optional<std::string> workflow;
};

/// One connections row.
struct ConnectionRow {
  std::int64_t seq = 0;
  std::int64_t ts_ms = 0;
  std::string id, execution_id, workflow, policy_sha256, kind, host;
  std::uint16_t port = 0;
  std::string resolved_ip, decision, rule_id, reason, detail, tls;
  std::uint64_t policy_generation = 0;  // 0: not recorded (before schema 7)
};

/// One requests row (its port, TLS and address are its connection's).
struct RequestRow {
  std::int64_t seq = 0;
  std::string connection_id, execution_id, workflow, method, host, path, decision, rule_id, reason;
  std::uint64_t policy_generation = 0;  // 0: not recorded (before schema 7)
};

/// One dns_queries row.
struct DnsRow {
  std::int64_t seq = 0;
  std::string execution_id, workflow, name, qtype, decision, rule_id, reason;
};

/// An audit store opened read-only.
class History {
 public:
  static base::Result<History> open(const std::filesystem::path& db);

  /// Each row of the scope, in chain order, read a page at a time (constant memory).
  /// `ignore_since`: connections asked for before `since` still carry later requests.
  base::Result<void> eachConnection(const Scope& scope, bool ignore_since,
                                    const std::function<void(const ConnectionRow&)>& fn);
  base::Result<void> eachRequest(const Scope& scope,
                                 const std::function<void(const RequestRow&)>& fn);
  base::Result<void> eachDns(const Scope& scope, const std::function<void(const DnsRow&)>& fn);

  /// The policy text stored under `sha256`; nullopt when the store does not hold it.
  base::Result<std::optional<std::string>> policyText(const std::string& sha256);
  /// The policy_sha256 of an execution ("" when unknown).
  base::Result<std::string> executionPolicy(const std::string& execution_id);
  /// Whether an executions row with this id exists.
  base::Result<bool> hasExecution(const std::string& execution_id);
  /// Ok when each id names an executions row; else kNotFound naming the first that does not.
  base::Result<void> requireExecutions(const std::vector<std::string>& execution_ids);

 private:
  explicit History(std::unique_ptr<audit::Reader> reader) : reader_(std::move(reader)) {}
  base::Result<void> pages(const std::string& select, const std::string& where,
                           const std::function<void(const std::vector<audit::Cell>&)>& fn);
  std::shared_ptr<audit::Reader> reader_;
};

}  // namespace sluice::replay
