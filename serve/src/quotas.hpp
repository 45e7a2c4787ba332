// Per-caller shares of the daemon (docs/serve.md "Quotas"): how many sessions may be open and
// executions run at once, in all and per caller, so that one caller holding a token cannot take
// every slot from the others. A refusal is a 429 naming which share is full, with Retry-After.
#pragma once

#include <chrono>
#include <cstddef>
#include <expected>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/base/error.hpp"
#include "sluice/serve/server.hpp"

namespace sluice::serve {

struct Shares {
  std::size_t sessions = 0, sessions_per_caller = 0;
  std::size_t runs = 0, runs_per_caller = 0;
  std::chrono::milliseconds max_session_ttl{};
};

/// The shares `o` asks for, each per-caller share left 0 given its default: the whole total
/// when at most one caller is known, else max(1, total / 2), so that with two callers or more
/// no one caller can hold what the others need. `known_callers` counts token lines,
/// --approver-uid values and one for a Unix listener (its owner).
Shares sharesFor(const ServeOptions& o, std::size_t known_callers);

/// Retry-After of a full quota, by its reason: runs end soon; sessions end by their client,
/// idle timeout or TTL.
inline constexpr unsigned kRunRetryAfter = 1;
inline constexpr unsigned kSessionRetryAfter = 5;

/// The Retry-After (seconds) of a refusal with this reason: a quota's, or 0 for any other.
unsigned retryAfter(std::string_view reason);

/// Units of one kind (a session open, an execution running) held per caller, under a total
/// and a per-caller cap. Thread-safe.
class Quota {
 public:
  /// `what` names a unit in messages ("sessions open"), `flag` the option setting the total
  /// ("--max-sessions"); reasons are `reason` and `reason`_for_caller.
  Quota(std::size_t total, std::size_t per_caller, std::string what, std::string flag,
        std::string reason);
  /// Holds one unit for `caller` until the returned pointer's last copy goes; or the refusal
  /// (kResourceExhausted with the quota's reason: 429 + retryAfter(reason)).
  base::Result<std::shared_ptr<void>> acquire(const std::string& caller);
  /// Units held now, by everyone.
  std::size_t held() const;

  struct State;  // quotas.cpp; shared with the holds

 private:
  std::shared_ptr<State> state_;
};

}  // namespace sluice::serve
