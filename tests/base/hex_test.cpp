// Hex: round trips, either case in, lowercase out, and refusal of anything else.
#include "sluice/base/hex.hpp"

#include <gtest/gtest.h>

namespace sluice::base {
namespace {

TEST(HexTest, EncodesLowercaseTwoDigitsPerByte) {
  EXPECT_EQ(hexEncode(std::string_view("\x00\x01\xab\xff", 4)), "0001abff");
  EXPECT_EQ(hexEncode(std::string_view()), "");
}

TEST(HexTest, DecodesEitherCaseAndRoundTrips) {
  auto b = hexDecode("00FFaB10");
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, (std::vector<std::uint8_t>{0x00, 0xff, 0xab, 0x10}));
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  auto back = hexDecode(hexEncode(all));
  ASSERT_TRUE(back);
  EXPECT_EQ(std::string(back->begin(), back->end()), all);
}

TEST(HexTest, RefusesOddLengthsAndNonDigits) {
  EXPECT_FALSE(hexDecode("abc"));
  EXPECT_FALSE(hexDecode("zz"));
  EXPECT_FALSE(hexDecode("0g"));
  EXPECT_FALSE(hexDecode(" 0"));
}

}  // namespace
}  // namespace sluice::base
