// The background loop: tasks in order on its own thread, ticks, wake, stop drains.
#include "sluice/base/loop.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

namespace sluice::base {
namespace {

TEST(LoopTest, TasksRunInOrderOnTheLoopsThread) {
  BackgroundLoop loop("test-loop");
  loop.start();
  std::vector<int> seen;
  std::thread::id loop_thread;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(loop.post([&, i] { seen.push_back(i); }));
  std::promise<void> done;
  loop.post([&] {
    loop_thread = std::this_thread::get_id();
    done.set_value();
  });
  done.get_future().wait();
  EXPECT_NE(loop_thread, std::this_thread::get_id());
  loop.stop();
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
}

TEST(LoopTest, StopRunsWhatIsQueuedThenRefusesMore) {
  std::atomic<int> ran{0};
  BackgroundLoop loop("drain");
  loop.start();
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  loop.post([opened] { opened.wait(); });
  for (int i = 0; i < 10; ++i) loop.post([&] { ++ran; });
  std::thread stopper([&] { loop.stop(); });
  gate.set_value();
  stopper.join();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_FALSE(loop.running());
  EXPECT_FALSE(loop.post([&] { ++ran; }));
  EXPECT_EQ(ran.load(), 10);
}

TEST(LoopTest, WakeRunsTheTickWithoutWaitingForThePeriod) {
  std::promise<void> ticked;
  std::atomic<bool> once{false};
  BackgroundLoop loop("wake");
  loop.start(
      [&] {
        if (!once.exchange(true)) ticked.set_value();
      },
      std::chrono::hours(1));
  loop.wake();
  // A one-hour period: only wake() can have run it. A hang here is the failure.
  ticked.get_future().wait();
  loop.stop();
  EXPECT_TRUE(once.load());
}

TEST(LoopTest, PeriodicTickRunsRepeatedly) {
  std::atomic<int> ticks{0};
  std::promise<void> three;
  BackgroundLoop loop("tick");
  loop.start(
      [&] {
        if (++ticks == 3) three.set_value();
      },
      std::chrono::milliseconds(1));
  three.get_future().wait();
  loop.stop();
  EXPECT_GE(ticks.load(), 3);
}

TEST(LoopTest, ScheduledTickRunsAtOnceThenWhenItAsksThenOnlyOnWake) {
  std::atomic<int> ticks{0};
  std::promise<void> three, four;
  BackgroundLoop loop("scheduled");
  loop.startScheduled([&] {
    const int n = ++ticks;
    if (n == 3) three.set_value();
    if (n == 4) four.set_value();
    // Due again in 1 ms for the first three runs; then never, unless woken.
    return n < 3 ? BackgroundLoop::Clock::now() + std::chrono::milliseconds(1)
                 : BackgroundLoop::Clock::time_point::max();
  });
  three.get_future().wait();  // runs 1 (at start), 2 and 3 (when due): no wake() yet
  EXPECT_EQ(ticks.load(), 3);
  loop.wake();
  four.get_future().wait();  // a hang here is the failure
  loop.stop();
  EXPECT_EQ(ticks.load(), 4);
}

TEST(LoopTest, PostBeforeStartIsRefused) {
  BackgroundLoop loop("idle");
  EXPECT_FALSE(loop.post([] {}));
  loop.stop();  // never started: nothing to join
}

}  // namespace
}  // namespace sluice::base
