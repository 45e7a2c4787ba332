// Workers (workers.hpp).
#include "workers.hpp"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace sluice::serve {

struct Workers::State {
  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  int idle = 0;
  bool stopping = false;
};

namespace {

void loop(const std::shared_ptr<Workers::State>& s, std::function<void()> job) {
  for (;;) {
    job();
    job = nullptr;  // what the job captured goes now, not when the next one comes
    std::unique_lock lock(s->mu);
    if (s->stopping || s->idle >= Workers::kMaxIdle) return;
    ++s->idle;
    s->wake.wait_for(lock, std::chrono::seconds(Workers::kIdleSeconds),
                     [&] { return !s->jobs.empty() || s->stopping; });
    --s->idle;
    if (s->jobs.empty()) return;  // idle too long, or stopping
    job = std::move(s->jobs.front());
    s->jobs.pop_front();
  }
}

}  // namespace

Workers::Workers() : state_(std::make_shared<State>()) {}

Workers::~Workers() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->wake.notify_all();
}

void Workers::run(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mu);
    // Only as many queued jobs as there are idle threads to take them: each wakes for one.
    if (static_cast<std::size_t>(state_->idle) > state_->jobs.size()) {
      state_->jobs.push_back(std::move(job));
      state_->wake.notify_one();
      return;
    }
  }
  std::thread t(loop, state_, std::move(job));
  pthread_setname_np(t.native_handle(), "sluice-work");
  t.detach();
}

}  // namespace sluice::serve
