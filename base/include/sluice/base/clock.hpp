// The two clocks: wall time for records, monotonic time for durations and deadlines.
#pragma once

#include <cstdint>

namespace sluice::base {

/// Milliseconds since the Unix epoch (UTC): what receipts and audit rows store.
std::int64_t nowMs();
/// Monotonic milliseconds, for durations; unrelated to the wall clock.
std::int64_t steadyMs();

}  // namespace sluice::base
