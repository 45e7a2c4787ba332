// The background loop.
#include "sluice/base/loop.hpp"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace sluice::base {

struct BackgroundLoop::State {
  std::string name;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool started = false;
  bool stopping = false;
  bool woken = false;
  // The tick returns when it is next due; max: only after a wake().
  std::function<Clock::time_point()> tick;
  Clock::time_point next_tick = Clock::time_point::max();
  std::thread thread;

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      if (!tasks.empty()) {
        auto task = std::move(tasks.front());
        tasks.pop_front();
        lock.unlock();
        task();
        lock.lock();
        continue;
      }
      if (stopping) return;
      if (tick && (woken || Clock::now() >= next_tick)) {
        woken = false;
        lock.unlock();
        const auto next = tick();
        lock.lock();
        next_tick = next;
        continue;
      }
      auto ready = [&] { return !tasks.empty() || stopping || woken; };
      // Never wait_until(max): the condition variable converts it to another clock and overflows.
      if (tick && next_tick != Clock::time_point::max())
        cv.wait_until(lock, next_tick, ready);
      else
        cv.wait(lock, ready);
    }
  }
};

BackgroundLoop::BackgroundLoop(std::string name) : state_(std::make_shared<State>()) {
  state_->name = std::move(name);
}

BackgroundLoop::~BackgroundLoop() { stop(); }

void BackgroundLoop::start(std::function<void()> tick, std::chrono::milliseconds period) {
  if (!tick) return startScheduled({});
  const bool periodic = period.count() > 0;
  std::lock_guard lock(state_->mu);
  if (state_->started) return;
  // A periodic tick is first due one period after the start.
  state_->next_tick = periodic ? Clock::now() + period : Clock::time_point::max();
  startLocked([tick = std::move(tick), period, periodic] {
    tick();
    return periodic ? Clock::now() + period : Clock::time_point::max();
  });
}

void BackgroundLoop::startScheduled(std::function<Clock::time_point()> tick) {
  std::lock_guard lock(state_->mu);
  if (state_->started) return;
  state_->next_tick = Clock::time_point::min();  // due at once
  startLocked(std::move(tick));
}

void BackgroundLoop::startLocked(std::function<Clock::time_point()> tick) {
  state_->started = true;
  state_->tick = std::move(tick);
  state_->thread = std::thread([s = state_] {
    // Linux keeps 15 bytes of a thread's name; longer names are refused whole.
    pthread_setname_np(pthread_self(), s->name.substr(0, 15).c_str());
    s->run();
  });
}

bool BackgroundLoop::post(std::function<void()> task) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping || !state_->started) return false;
    state_->tasks.push_back(std::move(task));
  }
  state_->cv.notify_one();
  return true;
}

void BackgroundLoop::wake() {
  {
    std::lock_guard lock(state_->mu);
    state_->woken = true;
  }
  state_->cv.notify_one();
}

void BackgroundLoop::stop() {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
  }
  state_->cv.notify_one();
  if (state_->thread.joinable()) state_->thread.join();
}

bool BackgroundLoop::running() const {
  std::lock_guard lock(state_->mu);
  return state_->started && !state_->stopping;
}

}  // namespace sluice::base
