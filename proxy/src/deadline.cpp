// The lazily armed deadline timer (deadline.hpp).
#include "deadline.hpp"

namespace sluice::proxy {

void armWatch(Watch& w, Clock::time_point at, std::shared_ptr<void> keep) {
  w.armed_at = at;
  auto g = ++w.arm_gen;
  w.timer.expires_at(at);
  w.timer.async_wait([&w, g, keep = std::move(keep)](ErrorCode ec) mutable {
    // Aborted (re-armed earlier, cancelled at connection end, or the Watch destroyed): `w` must
    // not be touched.
    if (ec || w.arm_gen != g) return;
    w.armed_at = Clock::time_point::max();
    if (w.deadline == Clock::time_point::max()) return;  // idle: stay unarmed
    if (Clock::now() >= w.deadline) {
      w.fired = true;
      ErrorCode ignored;
      if (w.socket) w.socket->cancel(ignored);
      return;
    }
    armWatch(w, w.deadline, std::move(keep));
  });
}

}  // namespace sluice::proxy
