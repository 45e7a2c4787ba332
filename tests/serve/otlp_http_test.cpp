// serve/src/otlp_http.cpp without a collector: --otlp-endpoint's URL, which failed POSTs are
// retried, the backoff and Retry-After (tests/otlp runs the exporter against a real receiver).
#include "otlp_http.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sluice::serve::detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(OtlpEndpoint, SchemeHostPortAndPrefix) {
  auto t = parseOtlpEndpoint("http://collector:4318");
  ASSERT_TRUE(t) << t.error().text();
  EXPECT_FALSE(t->tls);
  EXPECT_EQ(t->host, "collector");
  EXPECT_EQ(t->port, "4318");
  EXPECT_EQ(t->prefix, "");
  t = parseOtlpEndpoint("https://[::1]/otel/");
  ASSERT_TRUE(t) << t.error().text();
  EXPECT_TRUE(t->tls);
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, "443");
  EXPECT_EQ(t->prefix, "/otel");  // the trailing '/' cut: /otel/v1/logs, not /otel//v1/logs
  t = parseOtlpEndpoint("http://127.0.0.1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->port, "80");
}

TEST(OtlpEndpoint, WhatIsNotAnEndpointIsRefusedAndNamed) {
  for (const char* bad : {"collector:4318", "ftp://collector", "http://", "http://:4318",
                          "http://collector:", "http://collector:43x8"}) {
    auto t = parseOtlpEndpoint(bad);
    ASSERT_FALSE(t) << bad;
    EXPECT_EQ(t.error().code, base::Code::kInvalidArgument) << bad;
    EXPECT_NE(t.error().message.find(bad), std::string::npos) << t.error().message;
  }
}

// A password in the URL would reach every warning that names the collector: refused, and the
// refusal does not repeat it. An '@' in the path is only a path.
TEST(OtlpEndpoint, CredentialsInTheUrlAreRefusedWithoutEchoingThem) {
  for (const char* url : {"http://otel:hunter2@collector:4318", "https://hunter2@collector/otel"}) {
    auto t = parseOtlpEndpoint(url);
    ASSERT_FALSE(t) << url;
    EXPECT_EQ(t.error().code, base::Code::kInvalidArgument);
    EXPECT_EQ(t.error().text().find("hunter2"), std::string::npos) << t.error().text();
  }
  auto t = parseOtlpEndpoint("http://collector:4318/team@otel");
  ASSERT_TRUE(t) << t.error().text();
  EXPECT_EQ(t->host, "collector");
  EXPECT_EQ(t->prefix, "/team@otel");
}

TEST(OtlpRetry, NoReply429And5xxAreRetriedOtherStatusesAreFinal) {
  EXPECT_TRUE(otlpRetryable(base::fail(base::Code::kUnavailable, "connection refused")));
  for (int status : {429, 500, 503})
    EXPECT_TRUE(otlpRetryable(OtlpReply{status, std::nullopt})) << status;
  for (int status : {200, 400, 401, 404, 413})
    EXPECT_FALSE(otlpRetryable(OtlpReply{status, std::nullopt})) << status;
}

TEST(OtlpRetry, BackoffDoublesToItsCeilingAndRetryAfterIsCapped) {
  const base::Result<OtlpReply> none = base::fail(base::Code::kUnavailable, "timed out");
  EXPECT_EQ(otlpBackoff(1, none), milliseconds(250));
  EXPECT_EQ(otlpBackoff(2, none), milliseconds(500));
  EXPECT_EQ(otlpBackoff(6, none), milliseconds(8000));
  EXPECT_EQ(otlpBackoff(60, none), milliseconds(8000));
  EXPECT_EQ(otlpBackoff(1, OtlpReply{503, seconds(3)}), milliseconds(3000));
  EXPECT_EQ(otlpBackoff(1, OtlpReply{429, seconds(7200)}), milliseconds(30000));
}

TEST(OtlpRetry, RetryAfterIsSecondsOrAnHttpDate) {
  EXPECT_EQ(parseRetryAfter("5"), seconds(5));
  EXPECT_EQ(parseRetryAfter("0"), seconds(0));
  EXPECT_EQ(parseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT"), seconds(0));  // past: now
  const auto later = parseRetryAfter("Fri, 01 Jan 2100 00:00:00 GMT");
  ASSERT_TRUE(later);
  EXPECT_GT(*later, seconds(3600));
  for (const char* bad : {"", "-1", "soon", "5s", "Sun, 06 Nov 1994 08:49:37 GMT junk"})
    EXPECT_FALSE(parseRetryAfter(bad)) << bad;
}

}  // namespace
}  // namespace sluice::serve::detail
