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
  std::function<void()> tick;
  std::chrono::milliseconds period{0};
  std::thread thread;

  void run() {
    std::unique_lock lock(mu);
    auto next_tick = std::chrono::steady_clock::now() + period;
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
      bool due =
          tick && (woken || (period.count() > 0 && std::chrono::steady_clock::now() >= next_tick));
      if (due) {
        woken = false;
        lock.unlock();
        tick();
        lock.lock();
        next_tick = std::chrono::steady_clock::now() + period;
        continue;
      }
      auto ready = [&] { return !tasks.empty() || stopping || woken; };
      if (tick && period.count() > 0)
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
  std::lock_guard lock(state_->mu);
  if (state_->started) return;
  state_->started = true;
  state_->tick = std::move(tick);
  state_->period = period;
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
