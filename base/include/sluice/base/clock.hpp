// The two clocks: wall time for records, monotonic time for durations and deadlines.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::base {

/// Milliseconds since the Unix epoch (UTC): what receipts and audit rows store.
std::int64_t nowMs();
/// A wall-clock time point as milliseconds since the Unix epoch (a receipt's started_at).
std::int64_t epochMs(std::chrono::system_clock::time_point t);
/// Monotonic milliseconds, for durations; unrelated to the wall clock.
std::int64_t steadyMs();
/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds:
/// "2026-11-27T12:00:00.123Z". Pure arithmetic: unlike gmtime_r, it never reads the host's
/// time zone file (glibc's first gmtime_r does, on the path of every receipt).
std::string formatUtcMs(std::int64_t ms);

}  // namespace sluice::base
