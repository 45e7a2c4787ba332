// Normalising hosts, CONNECT authorities and URLs before matching.
#include "sluice/policy/target.hpp"

#include <gtest/gtest.h>

namespace sluice::policy {
namespace {

TEST(Target, HostsAreLowerCasedWithoutTrailingDot) {
  auto t = makeTarget("API.Example.COM.", 443).value();
  EXPECT_EQ(t.host, "api.example.com");
  EXPECT_FALSE(t.isIpLiteral());
}

TEST(Target, IpLiteralsBecomeCanonical) {
  auto t = makeTarget("0x7f.1", 80).value();
  EXPECT_TRUE(t.isIpLiteral());
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(makeTarget("[::1]", 80).value().authority(), "[::1]:80");
}

TEST(Target, RefusesMalformedHosts) {
  EXPECT_FALSE(makeTarget("bücher.de", 443));
  EXPECT_FALSE(makeTarget("a..b", 443));
  EXPECT_FALSE(makeTarget("-a.com", 443));
  EXPECT_FALSE(makeTarget("1.2.3.999", 443));  // ends in a number but is not an address
  EXPECT_FALSE(makeTarget("evil.com\r\nx", 443));
  EXPECT_FALSE(makeTarget(std::string(64, 'a') + ".com", 443));
  EXPECT_FALSE(makeTarget("example.com", 0));
  EXPECT_FALSE(makeTarget("[1.2.3.4]", 80));
}

TEST(Target, ParsesAuthorities) {
  auto t = parseAuthority("Example.com:8443").value();
  EXPECT_EQ(t.host, "example.com");
  EXPECT_EQ(t.port, 8443);
  EXPECT_EQ(parseAuthority("[::ffff:127.0.0.1]:443").value().host, "::ffff:127.0.0.1");
  EXPECT_FALSE(parseAuthority("example.com"));
  EXPECT_FALSE(parseAuthority("example.com:"));
  EXPECT_FALSE(parseAuthority("example.com:99999"));
  EXPECT_FALSE(parseAuthority("example.com:+80"));
  EXPECT_FALSE(parseAuthority("[::1:443"));
}

TEST(Target, ParsesUrls) {
  auto u = parseUrl("https://Stats.Internal.Example/v1/x?y=1").value();
  EXPECT_EQ(u.scheme, "https");
  EXPECT_EQ(u.target.host, "stats.internal.example");
  EXPECT_EQ(u.target.port, 443);
  EXPECT_EQ(u.path, "/v1/x");
  EXPECT_EQ(u.query, "y=1");
  EXPECT_EQ(parseUrl("http://example.com").value().path, "/");
  EXPECT_EQ(parseUrl("http://example.com:8080/").value().target.port, 8080);
  EXPECT_EQ(parseUrl("http://2130706433/").value().target.host, "127.0.0.1");
}

TEST(Target, RefusesConfusingUrls) {
  EXPECT_FALSE(parseUrl("ftp://example.com/"));
  EXPECT_FALSE(parseUrl("http://user@evil.com/"));
  EXPECT_FALSE(parseUrl("http://allowed.com@evil.com/"));
  EXPECT_FALSE(parseUrl("http://127.0.0.%31/"));
  // A fragment or a backslash in the path is refused by canonicalRequest (request_test).
  EXPECT_FALSE(parseUrl("http://example.com#frag"));
  EXPECT_FALSE(parseUrl("http://example.com\\@evil.com/"));
  EXPECT_FALSE(parseUrl("example.com/path"));
  EXPECT_FALSE(parseUrl("http:///path"));
}

}  // namespace
}  // namespace sluice::policy
