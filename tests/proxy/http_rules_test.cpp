// Unit tests of the HTTP rules the proxy adds to Beast: raw header checks, framing,
// hop-by-hop stripping, Host agreement and the refusal format.
#include "http_rules.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::proxy {
namespace {

TEST(HeaderBlock, AcceptsCleanHeaders) {
  EXPECT_FALSE(checkHeaderBlock("GET http://a/ HTTP/1.1\r\nHost: a\r\nX: y z\r\n\r\n"));
}

TEST(HeaderBlock, RefusesObsFoldBareLfBareCrAndNul) {
  EXPECT_TRUE(checkHeaderBlock("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"));
  EXPECT_TRUE(checkHeaderBlock("GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n"));
  EXPECT_TRUE(checkHeaderBlock("GET / HTTP/1.1\nX: a\r\n\r\n"));
  EXPECT_TRUE(checkHeaderBlock("GET / HTTP/1.1\rX: a\r\n\r\n"));
  EXPECT_TRUE(checkHeaderBlock(std::string_view("GET / HTTP/1.1\r\nX: \0\r\n\r\n", 22)));
}

http::fields fieldsOf(std::initializer_list<std::pair<const char*, const char*>> list) {
  http::fields f;
  for (auto& [k, v] : list) f.insert(k, v);
  return f;
}

TEST(Framing, SingleDecimalContentLengthOrChunked) {
  EXPECT_FALSE(checkFraming(fieldsOf({{"Content-Length", "10"}})));
  EXPECT_FALSE(checkFraming(fieldsOf({{"Transfer-Encoding", "Chunked"}})));
  EXPECT_FALSE(checkFraming(fieldsOf({})));
  EXPECT_EQ(checkFraming(fieldsOf({{"Content-Length", "1"}, {"Content-Length", "1"}}))->status,
            http::status::bad_request);
  EXPECT_TRUE(checkFraming(fieldsOf({{"Content-Length", "1,1"}})));
  EXPECT_TRUE(checkFraming(fieldsOf({{"Content-Length", "99999999999999999999"}})));
  EXPECT_TRUE(checkFraming(fieldsOf({{"Content-Length", "1"}, {"Transfer-Encoding", "chunked"}})));
  EXPECT_EQ(checkFraming(fieldsOf({{"Transfer-Encoding", "gzip, chunked"}}))->status,
            http::status::not_implemented);
}

TEST(HopByHop, StripsListedAndStandardFieldsButNeverFraming) {
  auto f = fieldsOf({{"Connection", "close, X-A, Content-Length, host"},
                     {"X-A", "1"},
                     {"Content-Length", "3"},
                     {"Host", "h"},
                     {"Keep-Alive", "5"},
                     {"Proxy-Authorization", "x"},
                     {"Proxy-Connection", "keep-alive"},
                     {"TE", "trailers"},
                     {"Trailer", "X"},
                     {"Upgrade", "h2c"},
                     {"X-B", "2"}});
  stripHopByHop(f);
  EXPECT_EQ(f.count("X-A"), 0u);
  EXPECT_EQ(f.count(http::field::connection), 0u);
  EXPECT_EQ(f.count(http::field::keep_alive), 0u);
  EXPECT_EQ(f.count(http::field::proxy_authorization), 0u);
  EXPECT_EQ(f.count(http::field::proxy_connection), 0u);
  EXPECT_EQ(f.count(http::field::te), 0u);
  EXPECT_EQ(f.count(http::field::trailer), 0u);
  EXPECT_EQ(f.count(http::field::upgrade), 0u);
  EXPECT_EQ(f.count(http::field::content_length), 1u);
  EXPECT_EQ(f.count(http::field::host), 1u);
  EXPECT_EQ(f.count("X-B"), 1u);
}

TEST(HopByHop, EveryConnectionFieldListsAndTheRestStay) {
  auto f = fieldsOf({{"X-1", "a"},
                     {"Connection", "x-gone"},
                     {"X-Gone", "1"},
                     {"X-2", "b"},
                     {"connection", "CLOSE, keep-alive"},
                     {"close", "odd but listed"},
                     {"x-gone", "2"},
                     {"X-1", "c"}});
  stripHopByHop(f);
  std::vector<std::string> left;
  for (const auto& field : f)
    left.push_back(std::string(field.name_string()) + ": " + std::string(field.value()));
  // Beast keeps fields of one name together, in the order they came.
  EXPECT_EQ(left, (std::vector<std::string>{"X-1: a", "X-1: c", "X-2: b"}));
}

TEST(HostAgreement, ComparesNormalisedHostAndPort) {
  auto t = policy::makeTarget("api.example", 80).value();
  EXPECT_FALSE(checkHostAgrees(fieldsOf({{"Host", "API.example."}}), t, 80));
  EXPECT_FALSE(checkHostAgrees(fieldsOf({{"Host", "api.example:80"}}), t, 80));
  EXPECT_FALSE(checkHostAgrees(fieldsOf({}), t, 80));
  EXPECT_TRUE(checkHostAgrees(fieldsOf({{"Host", "api.example:8080"}}), t, 80));
  EXPECT_TRUE(checkHostAgrees(fieldsOf({{"Host", "evil.example"}}), t, 80));
  EXPECT_TRUE(checkHostAgrees(fieldsOf({{"Host", "api.example:x"}}), t, 80));
  EXPECT_TRUE(checkHostAgrees(fieldsOf({{"Host", "a"}, {"Host", "a"}}), t, 80));
  auto v6 = policy::makeTarget("[::1]", 8080).value();
  EXPECT_FALSE(checkHostAgrees(fieldsOf({{"Host", "[::1]:8080"}}), v6, 80));
  auto lit = policy::makeTarget("127.0.0.1", 80).value();
  // Different spellings of one address agree.
  EXPECT_FALSE(checkHostAgrees(fieldsOf({{"Host", "2130706433"}}), lit, 80));
}

TEST(Refusal, RendersStatusReasonHeaderAndJson) {
  Refusal r = refusal(policy::Reason::kNoMatchingRule, "no rule matches x", "r1");
  EXPECT_EQ(r.status, http::status::forbidden);
  auto text = renderRefusal(r, "wf", false);
  EXPECT_EQ(text.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u);
  EXPECT_NE(text.find("\r\nX-Sluice-Reason: no_matching_rule\r\n"), std::string::npos);
  EXPECT_NE(text.find("\r\nConnection: close\r\n"), std::string::npos);
  auto body = nlohmann::json::parse(text.substr(text.find("\r\n\r\n") + 4));
  EXPECT_EQ(body, (nlohmann::json{{"error", "denied"},
                                  {"workflow", "wf"},
                                  {"rule", "r1"},
                                  {"reason", "no_matching_rule"},
                                  {"detail", "no rule matches x"}}));
}

TEST(Refusal, EveryReasonHasAStatusAndACategory) {
  // The table covers the whole vocabulary (a static_assert checks its order at build time).
  for (int i = 0; i <= static_cast<int>(policy::Reason::kClosed); ++i) {
    auto reason = static_cast<policy::Reason>(i);
    Refusal r = refusal(reason, "x");
    EXPECT_NE(policy::reasonName(reason), "unknown");
    EXPECT_FALSE(r.error.empty()) << policy::reasonName(reason);
    EXPECT_GE(static_cast<int>(r.status), 200);
  }
  EXPECT_EQ(refusal(policy::Reason::kAmbiguousTarget, "x").status, http::status::bad_request);
  EXPECT_EQ(refusal(policy::Reason::kUpstreamTimeout, "x").status, http::status::gateway_timeout);
  EXPECT_EQ(refusal(policy::Reason::kLimitExceeded, "x").status, http::status::too_many_requests);
}

// Found by proxy_session_fuzz: a detail quoting non-UTF-8 client bytes made the JSON dump
// throw, which ended the session without an answer.
TEST(Refusal, DetailWithInvalidUtf8StillRenders) {
  Refusal r = refusal(policy::Reason::kInvalidTarget, "scheme 'h\xb1tp' is not http");
  std::string text;
  EXPECT_NO_THROW(text = renderRefusal(r, "wf", false));
  EXPECT_EQ(text.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u);
  auto body = nlohmann::json::parse(text.substr(text.find("\r\n\r\n") + 4), nullptr, false);
  EXPECT_FALSE(body.is_discarded());
}

TEST(HttpRules, TransferEncodingOnHttp10IsRefused) {
  auto r = checkFraming(fieldsOf({{"Transfer-Encoding", "chunked"}}), 10);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, policy::Reason::kInvalidRequest);
  EXPECT_FALSE(checkFraming(fieldsOf({{"Transfer-Encoding", "chunked"}}), 11));
}

}  // namespace
}  // namespace sluice::proxy
