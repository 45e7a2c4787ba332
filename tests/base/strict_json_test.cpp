// Strict JSON (base/include/sluice/base/strict_json.hpp): a key named twice in any object,
// at any depth and in any spelling, is refused with the key and its line and column; what is
// valid parses as nlohmann::json::parse would.
#include "sluice/base/strict_json.hpp"

#include <gtest/gtest.h>

namespace sluice::base {
namespace {

TEST(StrictJson, ADuplicateKeyIsRefusedNamingTheKeyAndWhereItIs) {
  auto r = parseStrictJson(R"({"decision":"deny","decision":"allow"})");
  ASSERT_FALSE(r) << r->dump();
  EXPECT_TRUE(r.error().duplicate_key);
  EXPECT_EQ(r.error().line, 1u);
  EXPECT_EQ(r.error().column, 20u);  // the second key's opening quote
  EXPECT_EQ(r.error().describe(),
            "line 1, column 20: duplicate key \"decision\" (an object may name a key once)");
}

TEST(StrictJson, DuplicatesAreFoundAtAnyDepthAndInAnySpelling) {
  struct Case {
    const char* text;
    const char* key;
    std::size_t line, column;
  };
  const Case cases[] = {
      {"{\"a\": 1,\n  \"b\": {\"x\": 1, \"x\": 2}}", "\"x\"", 2, 17},
      {"[{\"k\": 1}, {\"k\": 1, \"k\": 2}]", "\"k\"", 1, 21},
      {R"({"params": {"arguments": {"path": "/a", "p\u0061th": "/b"}}})", "\"path\"", 1, 41},
      {R"({"a\"b": 1, "a\"b": 2})", R"("a\"b")", 1, 13},
      {R"({"id": 1, "method": "ping", "id": 2})", "\"id\"", 1, 29},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = parseStrictJson(c.text);
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().duplicate_key);
    EXPECT_NE(r.error().message.find(std::string("duplicate key ") + c.key), std::string::npos)
        << r.error().message;
    EXPECT_EQ(r.error().line, c.line);
    EXPECT_EQ(r.error().column, c.column);
  }
}

TEST(StrictJson, ValidTextParsesAsUsualAndSyntaxErrorsSayWhere) {
  const char* text = R"({"a": [{"k": 1}, {"k": 2}], "b": {"k": null}, "c": "\u00e9", "d": -1.5e3})";
  auto r = parseStrictJson(text);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(*r, nlohmann::json::parse(text));
  EXPECT_EQ(*parseStrictJson("[1,2]"), nlohmann::json::parse("[1,2]"));
  EXPECT_EQ(*parseStrictJson("\"s\""), "s");
  for (const char* bad : {"", "{\"a\":", "{\"a\" 1}", "[1,]", "{} {}", "{\"a\":1}x"}) {
    SCOPED_TRACE(bad);
    auto e = parseStrictJson(bad);
    ASSERT_FALSE(e);
    EXPECT_FALSE(e.error().duplicate_key);
    EXPECT_NE(e.error().describe().find("line 1, column "), std::string::npos);
    // The library's own class name and a second copy of the position stay out of the
    // message an API caller reads.
    EXPECT_EQ(e.error().message.find("json.exception"), std::string::npos) << e.error().message;
    EXPECT_EQ(e.error().message.find("line"), std::string::npos) << e.error().message;
  }
  auto e = parseStrictJson("{\n  \"a\": 1,\n  \"b\" 2}");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().line, 3u);
}

}  // namespace
}  // namespace sluice::base
