// The clocks: epochMs is the one conversion of a wall-clock time point to stored milliseconds.
#include "sluice/base/clock.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

// Receipts, audit exports and approvals print times this one way: UTC, milliseconds, "Z".
TEST(ClockTest, FormatUtcMsIsRfc3339InUtcWithMilliseconds) {
  EXPECT_EQ(formatUtcMs(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(formatUtcMs(1'700'000'000'001), "2023-11-14T22:13:20.001Z");
  EXPECT_EQ(formatUtcMs(1'709'251'199'999), "2024-02-29T23:59:59.999Z");  // a leap day
  EXPECT_EQ(formatUtcMs(1'795'781'468'290), "2026-11-27T12:11:08.290Z");
  EXPECT_EQ(formatUtcMs(-1), "1969-12-31T23:59:59.999Z");  // before the epoch: floored
  EXPECT_EQ(formatUtcMs(253'402'300'799'999), "9999-12-31T23:59:59.999Z");
  // Each agrees with the C library's gmtime_r, second by second, across a day and a year.
  for (std::int64_t s = 1'795'737'600 - 86'400 * 400; s < 1'795'737'600; s += 86'399) {
    const time_t t = static_cast<time_t>(s);
    struct tm tm {};
    ASSERT_NE(gmtime_r(&t, &tm), nullptr);
    char want[64];
    std::snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.042Z", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    EXPECT_EQ(formatUtcMs(s * 1000 + 42), want);
  }
  // The host's time zone plays no part.
  const char* tz = std::getenv("TZ");
  const std::string saved = tz ? tz : "";
  ::setenv("TZ", "Pacific/Kiritimati", 1);
  ::tzset();
  EXPECT_EQ(formatUtcMs(0), "1970-01-01T00:00:00.000Z");
  if (tz)
    ::setenv("TZ", saved.c_str(), 1);
  else
    ::unsetenv("TZ");
  ::tzset();
}

}  // namespace
}  // namespace sluice::base
