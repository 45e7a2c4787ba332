// The two clocks: wall time for records, monotonic time for durations and deadlines.
#pragma once

#include <chrono>
#include <cstdint>

namespace sluice::base {

/// Milliseconds since the Unix epoch (UTC): what receipts and audit rows store.
std::int64_t nowMs();
/// A wall-clock time point as milliseconds since the Unix epoch (a receipt's started_at).
std::int64_t epochMs(std::chrono::system_clock::time_point t);
/// Monotonic milliseconds, for durations; unrelated to the wall clock.
std::int64_t steadyMs();

}  // namespace sluice::base
