// Clocks.
#include "sluice/base/clock.hpp"

#include <chrono>

namespace sluice::base {

std::int64_t nowMs() { return epochMs(std::chrono::system_clock::now()); }

std::int64_t epochMs(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::int64_t steadyMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace sluice::base
