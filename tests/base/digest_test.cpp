// SHA-256 against the FIPS 180-2 vectors, one-shot and streamed.
#include "sluice/base/digest.hpp"

#include <gtest/gtest.h>

namespace sluice::base {
namespace {

TEST(DigestTest, KnownVectors) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestTest, StreamingMatchesOneShotAndResets) {
  std::string million(1000000, 'a');
  Sha256 s;
  for (std::size_t i = 0; i < million.size(); i += 4096)
    s.update(std::string_view(million).substr(i, 4096));
  EXPECT_EQ(s.finishHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  s.update("abc");
  EXPECT_EQ(s.finishHex(), sha256Hex("abc"));
}

}  // namespace
}  // namespace sluice::base
