// pathShape: what `policy learn` generalises in a path, and what it keeps.
#include <gtest/gtest.h>

#include "sluice/replay/learn.hpp"

namespace sluice::replay {
namespace {

TEST(PathShape, IdentifiersBecomeWildcards) {
  EXPECT_EQ(pathShape("/v1/items/123"), "/v1/items/*");
  EXPECT_EQ(pathShape("/v1/items/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
            "/v1/items/*");
  EXPECT_EQ(pathShape("/users/3fa85f64-5717-4562-b3fc-2c963f66afa6/orders/7"), "/users/*/orders/*");
  EXPECT_EQ(pathShape("/blobs/a1b2c3d4"), "/blobs/*");
  EXPECT_EQ(pathShape("/s/Xk9_aQ2-pLm7Rz4wT"), "/s/*");
}

TEST(PathShape, WordsVersionsAndFileNamesStay) {
  EXPECT_EQ(pathShape("/v1/items"), "/v1/items");
  EXPECT_EQ(pathShape("/"), "/");
  EXPECT_EQ(pathShape("/v2/items/"), "/v2/items/");
  EXPECT_EQ(pathShape("/deadbeef"), "/deadbeef");  // hex letters only: a word
  EXPECT_EQ(pathShape("/docs/getting-started-guide"), "/docs/getting-started-guide");
  EXPECT_EQ(pathShape("/is-number/-/is-number-7.0.0.tgz"), "/is-number/-/is-number-7.0.0.tgz");
}

TEST(PathShape, GlobCharactersInALiteralSegmentMatchOnlyOneCharacter) {
  EXPECT_EQ(pathShape("/a*b/c"), "/a?b/c");
}

}  // namespace
}  // namespace sluice::replay
