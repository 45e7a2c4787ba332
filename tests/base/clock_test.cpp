// The clocks: epochMs is the one conversion of a wall-clock time point to stored milliseconds.
#include "sluice/base/clock.hpp"

#include <gtest/gtest.h>

namespace sluice::base {
namespace {

TEST(ClockTest, EpochMsCountsWholeMillisecondsSinceTheEpoch) {
  using namespace std::chrono;
  EXPECT_EQ(epochMs(system_clock::time_point{}), 0);
  EXPECT_EQ(epochMs(system_clock::time_point{seconds(1'700'000'000) + microseconds(1'999)}),
            1'700'000'000'001);
  const std::int64_t before = epochMs(system_clock::now());
  const std::int64_t now = nowMs();
  EXPECT_GE(now, before);
  EXPECT_LT(now - before, 60'000);  // the same clock, not a different epoch
}

}  // namespace
}  // namespace sluice::base
