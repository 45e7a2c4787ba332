// Output formats: RFC 4180 CSV, JSON with embedded JSON columns, aligned tables.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sluice/audit/reader.hpp"

namespace sluice::audit {
namespace {

ResultTable sample() {
  ResultTable t;
  t.columns = {"id", "detail", "n", "secrets"};
  t.json_columns = {false, false, false, true};
  t.rows.push_back({Cell{std::string("a")}, Cell{std::string("plain")}, Cell{std::int64_t{7}},
                    Cell{std::string(R"(["tok"])")}});
  t.rows.push_back({Cell{std::string("b")}, Cell{std::string("has,comma \"quoted\"\nnewline")},
                    Cell{std::monostate{}}, Cell{std::string("[]")}});
  return t;
}

TEST(FormatTest, CsvFollowsRfc4180) {
  EXPECT_EQ(formatResult(sample(), OutputFormat::kCsv),
            "id,detail,n,secrets\r\n"
            "a,plain,7,\"[\"\"tok\"\"]\"\r\n"
            "b,\"has,comma \"\"quoted\"\"\nnewline\",,[]\r\n");
}

TEST(FormatTest, JsonIsOneDocumentWithTypedValues) {
  auto j = nlohmann::json::parse(formatResult(sample(), OutputFormat::kJson));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["n"], 7);
  EXPECT_EQ(j[0]["secrets"], nlohmann::json::array({"tok"}));
  EXPECT_TRUE(j[1]["n"].is_null());
  EXPECT_EQ(j[1]["detail"], "has,comma \"quoted\"\nnewline");
}

TEST(FormatTest, TableIsAligned) {
  std::string out = formatResult(sample(), OutputFormat::kTable);
  EXPECT_EQ(out.substr(0, out.find('\n')), "id  detail                       n  secrets");
  EXPECT_NE(out.find("has,comma \"quoted\"\\nnewline"), std::string::npos) << out;
  EXPECT_NE(out.find("a   plain                        7  [\"tok\"]"), std::string::npos) << out;
}

TEST(FormatTest, ParseFormat) {
  EXPECT_EQ(parseFormat("csv").value(), OutputFormat::kCsv);
  EXPECT_FALSE(parseFormat("xml").has_value());
}

}  // namespace
}  // namespace sluice::audit
