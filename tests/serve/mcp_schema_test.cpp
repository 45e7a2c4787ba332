// checkJsonSchema (serve/src/mcp_schema.hpp) on the published tools' input schemas: what passes,
// and errors that name the place and the rule. Valid arguments touch every property of every
// tool, so a keyword the checker does not know in a published schema fails here, not at a call.
#include "mcp_schema.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mcp_tools.hpp"

namespace sluice::serve {
namespace {
using nlohmann::json;

const json& inputSchema(const std::string& tool) {
  for (const auto& t : McpTools::definitions())
    if (t["name"] == tool) return t["inputSchema"];
  throw std::runtime_error("no tool " + tool);
}

std::string error(const std::string& tool, const json& args) {
  auto r = checkJsonSchema(inputSchema(tool), args, "arguments");
  return r ? "" : r.error();
}

TEST(McpSchema, ValidArgumentsPass) {
  EXPECT_EQ(error("run_command", {{"command", "ls"}}), "");
  EXPECT_EQ(error("run_command", {{"argv", {"ls", "-l"}}, {"stdin", "x"}, {"timeout", 5}}), "");
  EXPECT_EQ(error("run_command", {{"argv", {"ls"}}, {"timeout", "30s"}}), "");
  EXPECT_EQ(error("write_file", {{"path", "a"}, {"content", ""}}), "");
  EXPECT_EQ(error("list_files", json::object()), "");
  EXPECT_EQ(error("list_files", {{"path", "/output"}}), "");
  EXPECT_EQ(error("explain_egress", {{"url", "https://x.example/"}, {"method", "POST"}}), "");
}

TEST(McpSchema, ErrorsNameThePlaceAndTheRule) {
  EXPECT_EQ(error("run_command", {{"command", 5}}), "arguments.command: must be a string");
  EXPECT_EQ(error("run_command", {{"argv", {"ls", 3}}}), "arguments.argv[1]: must be a string");
  EXPECT_EQ(error("run_command", {{"argv", json::array()}}),
            "arguments.argv: must have at least 1 item(s)");
  EXPECT_EQ(error("run_command", {{"timeout", true}}),
            "arguments.timeout: must be a number or a string");
  EXPECT_EQ(error("write_file", {{"path", "a"}}), "arguments: 'content' is required");
  EXPECT_EQ(error("read_file", {{"path", ""}}), "arguments.path: must not be empty");
  EXPECT_EQ(error("read_file", {{"path", "a"}, {"mode", "r"}}),
            "arguments: unknown property 'mode' (known: path)");
  EXPECT_EQ(error("list_files", json::array()), "arguments: must be an object");
}

TEST(McpSchema, RunCommandNeedsExactlyOneOfCommandAndArgv) {
  EXPECT_TRUE(McpTools::validate("run_command", {{"command", "ls"}}).has_value());
  EXPECT_FALSE(McpTools::validate("run_command", json::object()).has_value());
  auto both = McpTools::validate("run_command", {{"command", "ls"}, {"argv", {"ls"}}});
  ASSERT_FALSE(both.has_value());
  EXPECT_NE(both.error().find("exactly one"), std::string::npos);
  auto unknown = McpTools::validate("rm_rf", json::object());
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().find("unknown tool 'rm_rf'"), std::string::npos);
}

TEST(McpSchema, AnUnknownKeywordIsRefusedNotIgnored) {
  auto r = checkJsonSchema(json{{"type", "string"}, {"pattern", "^a"}}, "b", "x");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error(), "x: schema keyword 'pattern' is not supported");
}

}  // namespace
}  // namespace sluice::serve
