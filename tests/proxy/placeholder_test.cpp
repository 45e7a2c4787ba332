// Placeholder detection and swapping (proxy/src/placeholder.hpp) and the whole-body stage's
// choice (request_body.hpp), as units; inspect_test.cpp drives both through the proxy.
#include "placeholder.hpp"

#include <gtest/gtest.h>

#include "injection.hpp"
#include "request_body.hpp"
#include "sluice/policy/loader.hpp"

namespace sluice::proxy {
namespace {

const std::vector<Placeholder> kPlaceholders = {
    {"API_TOKEN", "sluice_ph_aaaa", "api_token", "api"},
    {"OTHER_TOKEN", "sluice_ph_bbbb", "other_token", "other"},
};

TEST(Placeholders, FoundForTheirOwnRuleAndAsLeaksForAnother) {
  auto own = findPlaceholders(R"({"k":"sluice_ph_aaaa"})", "api", kPlaceholders);
  EXPECT_TRUE(own.own);
  EXPECT_FALSE(own.leak);
  auto leak = findPlaceholders("q=sluice_ph_bbbb", "api", kPlaceholders);
  EXPECT_FALSE(leak.own);
  EXPECT_TRUE(leak.leak);
  auto none = findPlaceholders("sluice_ph_ but no token", "api", kPlaceholders);
  EXPECT_FALSE(none.own || none.leak);
  // No deciding rule: every token is a leak.
  EXPECT_TRUE(findPlaceholders("sluice_ph_aaaa", "", kPlaceholders).leak);
  PlaceholderHits both = own;
  both |= leak;
  EXPECT_TRUE(both.own && both.leak);
}

TEST(Placeholders, SwapReplacesEveryOccurrenceOfTheRulesOwnTokenOnly) {
  auto store = policy::makeSecretStore(
      {{"api_token", "SECRET-VALUE-LONGER-THAN-TOKEN"}, {"other_token", "OTHER"}});
  std::string text = "a=sluice_ph_aaaa&b=sluice_ph_aaaa&c=sluice_ph_bbbb";
  std::vector<std::string> names;
  EXPECT_FALSE(swapPlaceholders(text, "api", store.get(), kPlaceholders, names));
  EXPECT_EQ(text,
            "a=SECRET-VALUE-LONGER-THAN-TOKEN&b=SECRET-VALUE-LONGER-THAN-TOKEN&c=sluice_ph_bbbb");
  EXPECT_EQ(names, std::vector<std::string>{"api_token"});
  std::string none = "nothing";
  EXPECT_FALSE(swapPlaceholders(none, "api", store.get(), kPlaceholders, names));
  EXPECT_EQ(none, "nothing");
  EXPECT_EQ(names.size(), 1u) << "a name is added once";
}

TEST(Placeholders, AMissingSecretIsAnErrorNamingItNotItsValue) {
  auto store = policy::makeSecretStore({{"unrelated", "x"}});
  std::string text = "sluice_ph_aaaa";
  std::vector<std::string> names;
  auto why = swapPlaceholders(text, "api", store.get(), kPlaceholders, names);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("api_token"), std::string::npos);
  EXPECT_TRUE(swapPlaceholders(text, "api", nullptr, kPlaceholders, names));
  EXPECT_TRUE(hasPlaceholder("api", kPlaceholders));
  EXPECT_FALSE(hasPlaceholder("third", kPlaceholders));
}

TEST(Placeholders, TokensOfAnotherShapeAreSearchedToo) {
  const std::vector<Placeholder> phs = {{"AWS_ACCESS_KEY_ID", "AKIAEXAMPLE0123456", "k", "aws"}};
  EXPECT_TRUE(findPlaceholders("id=AKIAEXAMPLE0123456", "api", phs).leak);
  EXPECT_TRUE(findPlaceholders("id=AKIAEXAMPLE0123456", "aws", phs).own);
}

TEST(Placeholders, StreamingScanFindsATokenSplitAtEveryOffsetBeforeItLeaves) {
  const std::string body = std::string(100, 'x') + "sluice_ph_bbbb" + std::string(50, 'y');
  const std::size_t token_at = 100;
  for (std::size_t split = 1; split < body.size(); ++split) {
    StreamingLeakScan scan("api", kPlaceholders);
    std::string released;
    auto first = scan.apply(std::string_view(body).substr(0, split), false);
    ASSERT_TRUE(first || split >= token_at + 14) << split;
    if (first) released += *first;
    auto second = first ? scan.apply(std::string_view(body).substr(split), true) : first;
    EXPECT_FALSE(second) << "split at " << split;
    EXPECT_LE(released.size(), token_at) << "bytes of the token left before it was found";
  }
  // The rule's own token and clean bodies pass whole, in order, whatever the splits.
  const std::string own = std::string(40, 'a') + "sluice_ph_aaaa" + std::string(40, 'b');
  for (std::size_t split = 0; split <= own.size(); ++split) {
    StreamingLeakScan scan("api", kPlaceholders);
    std::string out;
    auto a = scan.apply(std::string_view(own).substr(0, split), false);
    ASSERT_TRUE(a);
    out += *a;
    auto b = scan.apply(std::string_view(own).substr(split), true);
    ASSERT_TRUE(b);
    out += *b;
    EXPECT_EQ(out, own) << split;
  }
}

TEST(Placeholders, StandInForTheHeaderSecretBesideAnHmacKey) {
  auto w = policy::parseWorkflow(R"(apiVersion: sluice/v1
kind: Workflow
name: wf
egress:
  rules:
    - id: api
      action: allow
      hosts: [api.example]
      tls: inspect
      inject:
        headers: {Authorization: "Bearer ${secret:z_token}"}
        placeholder_env: API_TOKEN
        hmac: {key: "${secret:a_key}", header: X-Sig, message: "${body}"}
)",
                                 "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto phs = makePlaceholders(*w);
  ASSERT_EQ(phs.size(), 1u);
  EXPECT_EQ(phs[0].env, "API_TOKEN");
  EXPECT_EQ(phs[0].secret, "z_token");
  EXPECT_EQ(phs[0].rule_id, "api");
}

// A parser that has read `head` (a request header).
std::unique_ptr<ReqParser> parsed(const std::string& head) {
  auto p = std::make_unique<ReqParser>();
  ErrorCode ec;
  p->put(net::buffer(head), ec);
  EXPECT_TRUE(p->is_header_done()) << ec.message();
  return p;
}

TEST(WholeBodyStage, ReadsWhatFitsAndStreamsOrRefusesTheRest) {
  const std::size_t bound = 100;
  auto small = parsed("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n");
  auto large = parsed("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n");
  auto chunked = parsed("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
  auto none = parsed("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  const BodyNeeds swaps{true, false, true}, signs{false, true, false}, scans{false, false, true},
      nothing{};
  EXPECT_EQ(wholeBodyNeed(*small, swaps, bound), WholeBody::kRead);
  EXPECT_EQ(wholeBodyNeed(*small, scans, bound), WholeBody::kRead);
  EXPECT_EQ(wholeBodyNeed(*small, nothing, bound), WholeBody::kStream);
  EXPECT_EQ(wholeBodyNeed(*large, swaps, bound), WholeBody::kStream);
  EXPECT_EQ(wholeBodyNeed(*large, scans, bound), WholeBody::kStream);
  EXPECT_EQ(wholeBodyNeed(*large, signs, bound), WholeBody::kTooLarge);
  EXPECT_EQ(wholeBodyNeed(*chunked, swaps, bound), WholeBody::kRead);
  EXPECT_EQ(wholeBodyNeed(*chunked, signs, bound), WholeBody::kRead);
  EXPECT_EQ(wholeBodyNeed(*chunked, scans, bound), WholeBody::kStream);
  EXPECT_EQ(wholeBodyNeed(*none, swaps, bound), WholeBody::kStream);
}

TEST(WholeBodyStage, FramingAndTrailers) {
  auto p = parsed("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
  std::string body = "3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n";
  char buf[64];
  while (!p->is_done() && !body.empty()) {
    p->get().body().data = buf;
    p->get().body().size = sizeof buf;
    ErrorCode ec;
    body.erase(0, p->put(net::buffer(body), ec));
    ASSERT_TRUE(!ec || ec == http::error::need_buffer) << ec.message();
  }
  ASSERT_TRUE(p->is_done());
  auto& fields = static_cast<PmrFields&>(p->get());
  EXPECT_EQ(fields.count("X-Trailer"), 1u) << "Beast adds trailer fields to the header";
  dropTrailers(fields, 2);
  EXPECT_EQ(fields.count("X-Trailer"), 0u);
  EXPECT_EQ(fields.count(http::field::host), 1u);
  setWholeBodyFraming(p->get(), 42);
  EXPECT_EQ(fields.count(http::field::transfer_encoding), 0u);
  EXPECT_EQ(p->get()[http::field::content_length], "42");
}

}  // namespace
}  // namespace sluice::proxy
