// The daemon's per-call step trace (timing.hpp).
#include "timing.hpp"

#include <cstdlib>

namespace sluice::serve {
namespace {
thread_local StepTrace* t_current = nullptr;
}  // namespace

bool StepTrace::enabled() {
  static const bool on = std::getenv("SLUICE_TIMING") != nullptr;
  return on;
}

StepTrace* StepTrace::current() { return t_current; }

void StepTrace::setCurrent(StepTrace* trace) { t_current = trace; }

std::string StepTrace::render() const {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  std::string out;
  for (std::size_t i = 1; i < marks_.size(); ++i) {
    const auto us = duration_cast<microseconds>(marks_[i].second - marks_[i - 1].second).count();
    out += std::string(marks_[i].first) + " " + std::to_string(us) + " us; ";
  }
  const auto total =
      marks_.empty() ? 0
                     : duration_cast<microseconds>(marks_.back().second - marks_[0].second).count();
  return out + "total " + std::to_string(total) + " us";
}

}  // namespace sluice::serve
