// Threads for the API's blocking work (runs, execs, file operations; the runner blocks).
#pragma once

#include <functional>
#include <memory>

namespace sluice::serve {

/// Runs each job on a thread of its own: an idle thread left by an earlier job if there is one
/// (waking it costs a fraction of starting a thread), else a new one. A thread with no job
/// waits up to kIdle for the next; at most kMaxIdle threads wait at once, any other ends after
/// its job, so a burst leaves no crowd of threads behind. A thread never ends while its job
/// runs (a sandbox started on it stays tied to it until the job is done). Thread-safe.
class Workers {
 public:
  static constexpr int kMaxIdle = 4;
  static constexpr int kIdleSeconds = 30;

  Workers();
  ~Workers();  // idle threads end; busy ones end after their job
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void run(std::function<void()> job);

  struct State;  // workers.cpp

 private:
  std::shared_ptr<State> state_;  // shared with the threads, which may outlive this object
};

}  // namespace sluice::serve
