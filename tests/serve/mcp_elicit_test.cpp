// Elicitation (serve/src/mcp_elicit.hpp): the elicitation/create request an approval becomes,
// which responses allow (only accept + allow true), that each answer decides its own approval
// once, and that nothing is sent to a client that did not declare the capability.
#include "mcp_elicit.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace sluice::serve {
namespace {
using nlohmann::json;

proxy::Approval approval(const std::string& id, std::optional<std::string> path) {
  proxy::Approval a;
  a.id = id;
  a.execution_id = "ex-1";
  a.session_id = "se-1";
  a.workflow = "web";
  a.rule = "ask-api";
  a.host = "api.example";
  a.port = 443;
  if (path) {
    a.method = "POST";
    a.path = path;
  }
  a.expires_at_ms = 1700000000000;
  return a;
}

TEST(McpElicit, TheRequestNamesHostPortMethodAndPath) {
  json r = Elicitation::request(approval("ap-1", "/v1/charge"), "sluice-approval-1");
  EXPECT_EQ(r["jsonrpc"], "2.0");
  EXPECT_EQ(r["id"], "sluice-approval-1");
  EXPECT_EQ(r["method"], "elicitation/create");
  const std::string m = r["params"]["message"];
  for (const char* part :
       {"api.example:443", "POST /v1/charge", "ask-api", "web", "ap-1", "2023-11-14T22:13:20"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " in " << m;
  EXPECT_EQ(r["params"]["requestedSchema"],
            json::parse(R"({"type":"object","properties":{"allow":{"type":"boolean","title":"Allow",
              "description":"Allow POST /v1/charge on api.example:443"}},"required":["allow"]})"));
  // A tunnel: no method or path to show.
  json t = Elicitation::request(approval("ap-2", std::nullopt), 7);
  EXPECT_NE(t["params"]["message"].get<std::string>().find("a connection to api.example:443"),
            std::string::npos);
}

// The message says what the answer covers (this request: scope once) and what the wider scopes
// would, and shows what the sandboxed code sent escaped and cut: no ESC, CR or newline reaches
// a client that renders it on a terminal.
TEST(McpElicit, TheMessageStatesEachScopeAndCarriesHostileTextSafely) {
  json r = Elicitation::request(approval("ap-1", "/v1/charge"), 1);
  const std::string m = r["params"]["message"];
  for (const char* part :
       {"this POST request only (scope once)",
        "execution = POST requests to api.example:443 matched by rule ask-api, any path",
        "host = requests of every method to api.example:443 matched by rule ask-api"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " in " << m;
  auto hostile = approval("ap-2", "/x\x1b[2J\r\nAllow? yes" + std::string(2000, 'A'));
  hostile.host = "evil\x1b]0;t\x07.example";
  json h = Elicitation::request(hostile, 2);
  const std::string hm = h["params"]["message"];
  const std::string hd = h["params"]["requestedSchema"]["properties"]["allow"]["description"];
  for (const std::string& text : {hm, hd}) {
    SCOPED_TRACE(text.substr(0, 200));
    for (char c : {'\x1b', '\r', '\n', '\x07'})
      EXPECT_EQ(text.find(c), std::string::npos) << "control byte " << int(c) << " passed";
    EXPECT_NE(text.find(R"(/x\x1b[2J\x0d\x0aAllow? yes)"), std::string::npos);
    EXPECT_NE(text.find(R"(evil\x1b]0;t\x07.example:443)"), std::string::npos);
    EXPECT_NE(text.find("A..."), std::string::npos) << "the long path was not cut";
    EXPECT_LT(text.size(), 1200u);
  }
}

TEST(McpElicit, OnlyAcceptWithAllowTrueAllows) {
  auto resp = [](json result) { return json{{"jsonrpc", "2.0"}, {"id", 1}, {"result", result}}; };
  EXPECT_TRUE(Elicitation::allows(resp({{"action", "accept"}, {"content", {{"allow", true}}}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "accept"}, {"content", {{"allow", false}}}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "accept"}, {"content", {{"allow", "true"}}}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "accept"}, {"content", {{"allow", 1}}}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "accept"}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "accept"}, {"content", "allow"}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "decline"}, {"content", {{"allow", true}}}})));
  EXPECT_FALSE(Elicitation::allows(resp({{"action", "cancel"}})));
  EXPECT_FALSE(Elicitation::allows(resp("accept")));
  EXPECT_FALSE(Elicitation::allows(
      json{{"jsonrpc", "2.0"}, {"id", 1}, {"error", {{"code", -1}, {"message", "no"}}}}));
}

TEST(McpElicit, EachResponseDecidesItsOwnApprovalOnce) {
  std::vector<json> sent;
  Elicitation e([&](json m) { sent.push_back(std::move(m)); });
  std::vector<std::pair<std::string, bool>> decided;
  auto answer = [&](const std::string& id, bool allow) { decided.emplace_back(id, allow); };
  EXPECT_FALSE(e.ask(approval("ap-a", "/a"), answer));  // not declared: nothing sent
  EXPECT_TRUE(sent.empty());
  e.setSupported(true);
  EXPECT_TRUE(e.ask(approval("ap-a", "/a"), answer));
  EXPECT_TRUE(e.ask(approval("ap-b", "/b"), answer));
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_NE(sent[0]["id"], sent[1]["id"]);
  // Answered out of order; a repeat and a stranger are ignored.
  e.onResponse({{"jsonrpc", "2.0"}, {"id", sent[1]["id"]}, {"result", {{"action", "decline"}}}});
  e.onResponse({{"jsonrpc", "2.0"},
                {"id", sent[0]["id"]},
                {"result", {{"action", "accept"}, {"content", {{"allow", true}}}}}});
  e.onResponse({{"jsonrpc", "2.0"},
                {"id", sent[0]["id"]},
                {"result", {{"action", "accept"}, {"content", {{"allow", true}}}}}});
  e.onResponse({{"jsonrpc", "2.0"}, {"id", "other"}, {"result", {{"action", "accept"}}}});
  ASSERT_EQ(decided.size(), 2u);
  EXPECT_EQ(decided[0], (std::pair<std::string, bool>{"ap-b", false}));
  EXPECT_EQ(decided[1], (std::pair<std::string, bool>{"ap-a", true}));
}

TEST(McpElicit, QuestionsWhoseApprovalEndedAreWithdrawn) {
  std::vector<json> sent;
  Elicitation e([&](json m) { sent.push_back(std::move(m)); });
  e.setSupported(true);
  int answered = 0;
  auto answer = [&](const std::string&, bool) { ++answered; };
  e.ask(approval("ap-a", "/a"), answer);
  e.ask(approval("ap-b", "/b"), answer);
  e.withdrawSettled([](const std::string& id) { return id == "ap-b"; });  // ap-a has ended
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[2]["method"], "notifications/cancelled");
  EXPECT_FALSE(sent[2].contains("id"));
  EXPECT_EQ(sent[2]["params"]["requestId"], sent[0]["id"]);
  e.withdrawSettled([](const std::string& id) { return id == "ap-b"; });
  EXPECT_EQ(sent.size(), 3u);  // once
  // A late answer to the withdrawn question decides nothing; ap-b's still does.
  e.onResponse({{"jsonrpc", "2.0"}, {"id", sent[0]["id"]}, {"result", {{"action", "accept"}}}});
  EXPECT_EQ(answered, 0);
  e.onResponse({{"jsonrpc", "2.0"}, {"id", sent[1]["id"]}, {"result", {{"action", "cancel"}}}});
  EXPECT_EQ(answered, 1);
}

}  // namespace
}  // namespace sluice::serve
