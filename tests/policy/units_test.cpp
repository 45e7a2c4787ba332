// Durations and sizes as written in policies and on the command line.
#include "sluice/policy/units.hpp"

#include <gtest/gtest.h>

namespace sluice::policy {
namespace {

using std::chrono::milliseconds;

TEST(Units, ParsesDurations) {
  EXPECT_EQ(parseDuration("30s").value(), milliseconds(30'000));
  EXPECT_EQ(parseDuration("2m").value(), milliseconds(120'000));
  EXPECT_EQ(parseDuration("1h").value(), milliseconds(3'600'000));
  EXPECT_EQ(parseDuration("1h30m").value(), milliseconds(5'400'000));
  EXPECT_EQ(parseDuration("250ms").value(), milliseconds(250));
  EXPECT_EQ(parseDuration("45").value(), milliseconds(45'000));
}

TEST(Units, RejectsBadDurations) {
  EXPECT_FALSE(parseDuration(""));
  EXPECT_FALSE(parseDuration("s"));
  EXPECT_FALSE(parseDuration("10 s"));
  EXPECT_FALSE(parseDuration("-5s"));
  EXPECT_FALSE(parseDuration("1.5s"));
  EXPECT_FALSE(parseDuration("99999999999999999999s"));
  EXPECT_NE(parseDuration("30x").error().find("unknown unit 'x'"), std::string::npos);
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parseSize("512MiB").value(), 512ull << 20);
  EXPECT_EQ(parseSize("1GB").value(), 1'000'000'000ull);
  EXPECT_EQ(parseSize("64KiB").value(), 65536ull);
  EXPECT_EQ(parseSize("100").value(), 100ull);
  EXPECT_EQ(parseSize("2G").value(), 2'000'000'000ull);
}

TEST(Units, RejectsBadSizes) {
  EXPECT_FALSE(parseSize(""));
  EXPECT_FALSE(parseSize("MiB"));
  EXPECT_FALSE(parseSize("1.5GiB"));
  EXPECT_FALSE(parseSize("99999999999TiB"));
  EXPECT_NE(parseSize("12QB").error().find("unknown unit 'QB'"), std::string::npos);
}

TEST(Units, FormatsRoundTrip) {
  EXPECT_EQ(formatDuration(milliseconds(90'000)), "1m30s");
  EXPECT_EQ(formatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(formatSize(512ull << 20), "512MiB");
  EXPECT_EQ(formatSize(1000), "1000B");
}

}  // namespace
}  // namespace sluice::policy
