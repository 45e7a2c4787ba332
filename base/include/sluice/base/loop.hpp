// A background loop: one named thread that runs posted tasks in order and, optionally, a tick
// every period; stop() runs what is queued, then joins. Every thread loop of sluice (the audit
// writer, the checkpointer, approval expiry, the pool filler, reapers) is one of these.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace sluice::base {

class BackgroundLoop {
 public:
  /// `name` is the thread's name in ps/top (15 bytes kept).
  explicit BackgroundLoop(std::string name);
  ~BackgroundLoop();  ///< stop()
  BackgroundLoop(const BackgroundLoop&) = delete;
  BackgroundLoop& operator=(const BackgroundLoop&) = delete;

  /// Starts the thread. `tick`, when given, runs every `period` (and after each wake()).
  void start(std::function<void()> tick = {},
             std::chrono::milliseconds period = std::chrono::milliseconds{0});
  /// Starts the thread with a tick that says when it is next due (time_point::max(): only after
  /// a wake()). It runs once at start, then when due or after each wake(), whichever is first.
  using Clock = std::chrono::steady_clock;
  void startScheduled(std::function<Clock::time_point()> tick);
  /// Runs `task` on the loop's thread after the tasks posted before it. Dropped after stop().
  /// Returns false when the loop is stopped (the task will not run).
  bool post(std::function<void()> task);
  /// Runs the tick now instead of at the end of the period.
  void wake();
  /// Runs the tasks already posted, then joins the thread; idempotent; not from the loop itself.
  void stop();
  bool running() const;

 private:
  void startLocked(std::function<Clock::time_point()> tick);  // state_->mu held
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace sluice::base
