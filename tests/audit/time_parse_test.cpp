// --since/--until: RFC 3339 and relative forms.
#include <gtest/gtest.h>

#include "sluice/audit/reader.hpp"

namespace sluice::audit {
namespace {

constexpr std::int64_t kNow = 1'763'720'000'000;

TEST(TimeParseTest, Rfc3339) {
  EXPECT_EQ(parseTime("2025-11-21T10:00:00Z", kNow).value(), 1'763'719'200'000);
  EXPECT_EQ(parseTime("2025-11-21T10:00:00.25Z", kNow).value(), 1'763'719'200'250);
  EXPECT_EQ(parseTime("2025-11-21T12:00:00+02:00", kNow).value(), 1'763'719'200'000);
  EXPECT_EQ(parseTime("2025-11-21t05:30:00-04:30", kNow).value(), 1'763'719'200'000);
  EXPECT_EQ(parseTime("2025-11-21", kNow).value(), 1'763'683'200'000);
}

TEST(TimeParseTest, Relative) {
  EXPECT_EQ(parseTime("1h", kNow).value(), kNow - 3'600'000);
  EXPECT_EQ(parseTime("7d", kNow).value(), kNow - 7 * 86'400'000LL);
  EXPECT_EQ(parseTime("90s", kNow).value(), kNow - 90'000);
  EXPECT_EQ(parseTime("15m", kNow).value(), kNow - 900'000);
  EXPECT_EQ(parseTime("2w", kNow).value(), kNow - 14 * 86'400'000LL);
}

TEST(TimeParseTest, Rejects) {
  for (const char* bad : {"", "yesterday", "1y", "2025-13-01", "2025-11-21T10:00:00",
                          "2025-11-21T10:00Zjunk", "-1h", "h"}) {
    auto r = parseTime(bad, kNow);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_NE(r.error().message.find("RFC 3339"), std::string::npos);
    }
  }
}

TEST(TimeParseTest, FormatRoundTrips) {
  EXPECT_EQ(formatTime(1'763'719'200'250), "2025-11-21T10:00:00.250Z");
  EXPECT_EQ(parseTime(formatTime(1'763'719'200'250), kNow).value(), 1'763'719'200'250);
}

}  // namespace
}  // namespace sluice::audit
