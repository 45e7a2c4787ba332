// The JSON dump never throws on bytes that are not UTF-8.
#include "sluice/base/json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::base {
namespace {

TEST(JsonTest, InvalidUtf8BecomesReplacementCharacter) {
  nlohmann::json j = {{"path", std::string("/a\xff\xfe")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // why the helper exists
  EXPECT_EQ(dumpJson(j), "{\"path\":\"/a\xEF\xBF\xBD\xEF\xBF\xBD\"}");
}

TEST(JsonTest, IndentIsOptional) {
  nlohmann::json j = {{"a", 1}};
  EXPECT_EQ(dumpJson(j), "{\"a\":1}");
  EXPECT_EQ(dumpJson(j, 2), "{\n  \"a\": 1\n}");
}

}  // namespace
}  // namespace sluice::base
