// SLUICE_TIMING=1: where one run's or exec's time goes inside the daemon, one log line per
// call (docs/benchmarks.md). Off, it costs one branch per step.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace sluice::serve {

/// The steps of one call, each stamped when it ended. The HTTP thread starts it and writes it
/// out once the answer is sent; the worker thread marks its own steps through current().
class StepTrace {
 public:
  /// The runner stamps an execution's start and end (RunResult) with this clock.
  using Clock = std::chrono::system_clock;

  /// Whether SLUICE_TIMING is set (read once).
  static bool enabled();
  /// The trace of the call this thread works on, or null (off, or no call).
  static StepTrace* current();
  static void setCurrent(StepTrace* trace);

  void mark(const char* step) { markAt(step, Clock::now()); }
  void markAt(const char* step, Clock::time_point t) { marks_.emplace_back(step, t); }
  /// "step 12 us; step 40 us; ...; total 1803 us": each step's time since the previous mark.
  std::string render() const;

 private:
  std::vector<std::pair<const char*, Clock::time_point>> marks_;
};

}  // namespace sluice::serve
