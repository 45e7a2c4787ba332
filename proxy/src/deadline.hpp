// Deadlines on one socket's current operation, without a timer syscall per request. Setting a
// deadline only stores a time stamp: the timer behind it is armed lazily (only when the new
// deadline is earlier than the armed one) and, when it fires, either cancels the socket's I/O
// (deadline passed) or re-arms for the current deadline. Works for TLS streams too: it
// cancels the lowest layer, which aborts the TLS operation on top.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "sluice/base/net.hpp"

namespace sluice::proxy {

using Clock = std::chrono::steady_clock;

/// The timer state of one socket.
struct Watch {
  explicit Watch(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
  Clock::time_point deadline = Clock::time_point::max();  // of the operation in progress
  Clock::time_point armed_at = Clock::time_point::max();  // max = timer not armed
  std::uint64_t arm_gen = 0;
  bool fired = false;
  tcp::socket* socket = nullptr;
};

/// Arms `w` for `at`; `keep` holds the owner of `w` alive while the timer is pending.
void armWatch(Watch& w, Clock::time_point at, std::shared_ptr<void> keep);

/// The deadline of one operation (RAII): set on construction, cleared on destruction.
class Deadline {
 public:
  /// `keep_alive` is called only when the timer must be armed (rarely).
  template <typename KeepAlive>
  Deadline(Watch& w, tcp::socket& s, Clock::time_point at, KeepAlive&& keep_alive) : w_(w) {
    w.socket = &s;
    w.deadline = at;
    w.fired = false;
    if (at < w.armed_at) armWatch(w, at, keep_alive());
  }
  ~Deadline() { w_.deadline = Clock::time_point::max(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  bool fired() const { return w_.fired; }

 private:
  Watch& w_;
};

}  // namespace sluice::proxy
