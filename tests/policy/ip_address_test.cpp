// IP literal spellings, CIDRs and the SSRF address classification.
#include "sluice/policy/ip_address.hpp"

#include <gtest/gtest.h>

namespace sluice::policy {
namespace {

std::string canon(std::string_view s) {
  auto ip = parseIpLiteral(s);
  return ip ? ip->str() : "<none>";
}

TEST(IpLiteral, EveryLoopbackSpellingIsOneAddress) {
  for (auto s : {"127.0.0.1", "2130706433", "0x7f.1", "0x7F000001", "0177.0.0.1", "127.1",
                 "127.0.1", "0x7f.0.0.1", "017700000001", "127.0.0.1."}) {
    EXPECT_EQ(canon(s), "127.0.0.1") << s;
  }
}

TEST(IpLiteral, MetadataAddressSpellings) {
  for (auto s :
       {"169.254.169.254", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376", "169.254.43518"}) {
    EXPECT_EQ(canon(s), "169.254.169.254") << s;
  }
}

TEST(IpLiteral, DottedQuadSpellsEveryOctetWidth) {
  // Every width of octet, both ends of the range, compared with inet_ntop's spelling.
  for (auto s : {"0.0.0.0", "255.255.255.255", "10.0.100.9", "1.22.203.4", "192.168.0.10"}) {
    EXPECT_EQ(canon(s), s);
  }
  EXPECT_EQ(IpAddress::v4(0xC0A80001).str(), "192.168.0.1");
}

TEST(IpLiteral, Ipv6Forms) {
  EXPECT_EQ(canon("[::1]"), "::1");
  EXPECT_EQ(canon("::1"), "::1");
  EXPECT_EQ(canon("[::ffff:127.0.0.1]"), "::ffff:127.0.0.1");
  EXPECT_EQ(canon("[::ffff:7f00:1]"), "::ffff:127.0.0.1");
  EXPECT_EQ(canon("[0:0:0:0:0:0:0:1]"), "::1");
  EXPECT_EQ(canon("[fe80::1%eth0]"), "<none>");  // zone ids are refused
}

TEST(IpLiteral, NotLiterals) {
  EXPECT_EQ(canon("0x"), "0.0.0.0");  // the URL parser reads an empty hex number as 0
  for (auto s : {"example.com", "1.2.3.4.5", "256.1.1.1", "1.2.3.0x100", "", "[127.0.0.1]",
                 "08.1.1.1", "1..2"}) {
    EXPECT_EQ(canon(s), "<none>") << s;
  }
}

TEST(Classify, Ipv4Ranges) {
  auto cls = [](std::string_view s) { return classifyAddress(*parseIpLiteral(s)); };
  EXPECT_EQ(cls("127.0.0.1"), AddressClass::kLoopback);
  EXPECT_EQ(cls("10.1.2.3"), AddressClass::kPrivate);
  EXPECT_EQ(cls("172.16.0.1"), AddressClass::kPrivate);
  EXPECT_EQ(cls("172.32.0.1"), AddressClass::kGlobal);
  EXPECT_EQ(cls("192.168.1.1"), AddressClass::kPrivate);
  EXPECT_EQ(cls("100.64.0.1"), AddressClass::kSharedCgnat);
  EXPECT_EQ(cls("169.254.169.254"), AddressClass::kLinkLocal);
  EXPECT_EQ(cls("0.0.0.0"), AddressClass::kUnspecified);
  EXPECT_EQ(cls("224.0.0.1"), AddressClass::kMulticast);
  EXPECT_EQ(cls("255.255.255.255"), AddressClass::kBroadcast);
  EXPECT_EQ(cls("240.0.0.1"), AddressClass::kReserved);
  EXPECT_EQ(cls("192.0.2.10"), AddressClass::kReserved);
  EXPECT_EQ(cls("8.8.8.8"), AddressClass::kGlobal);
  EXPECT_EQ(cls("93.184.216.34"), AddressClass::kGlobal);
}

TEST(Classify, Ipv6RangesAndEmbeddedIpv4) {
  auto cls = [](std::string_view s) { return classifyAddress(*parseIpLiteral(s)); };
  EXPECT_EQ(cls("::1"), AddressClass::kLoopback);
  EXPECT_EQ(cls("::"), AddressClass::kUnspecified);
  EXPECT_EQ(cls("fe80::1"), AddressClass::kLinkLocal);
  EXPECT_EQ(cls("fd00::1"), AddressClass::kUniqueLocal);
  EXPECT_EQ(cls("ff02::1"), AddressClass::kMulticast);
  EXPECT_EQ(cls("2001:db8::1"), AddressClass::kReserved);
  EXPECT_EQ(cls("2606:4700::1111"), AddressClass::kGlobal);
  // Embedded IPv4 forms take the class of what they embed.
  EXPECT_EQ(cls("::ffff:127.0.0.1"), AddressClass::kLoopback);
  EXPECT_EQ(cls("::ffff:169.254.169.254"), AddressClass::kLinkLocal);
  EXPECT_EQ(cls("::127.0.0.1"), AddressClass::kLoopback);       // compatible
  EXPECT_EQ(cls("64:ff9b::10.0.0.1"), AddressClass::kPrivate);  // NAT64
  EXPECT_EQ(cls("64:ff9b::a9fe:a9fe"), AddressClass::kLinkLocal);
  EXPECT_EQ(cls("2002:7f00:1::"), AddressClass::kLoopback);  // 6to4
  EXPECT_EQ(cls("2002:a9fe:a9fe::1"), AddressClass::kLinkLocal);
  EXPECT_EQ(cls("::ffff:8.8.8.8"), AddressClass::kGlobal);
  EXPECT_EQ(cls("64:ff9b::8.8.8.8"), AddressClass::kGlobal);
}

TEST(Cidr, ParsesAndContains) {
  auto c = parseCidr("10.20.0.0/16").value();
  EXPECT_TRUE(c.contains(*parseIpLiteral("10.20.255.1")));
  EXPECT_FALSE(c.contains(*parseIpLiteral("10.21.0.1")));
  EXPECT_TRUE(c.contains(*parseIpLiteral("::ffff:10.20.0.9")));  // mapped form is the same host
  auto v6 = parseCidr("fd00:1::/32").value();
  EXPECT_TRUE(v6.contains(*parseIpLiteral("fd00:1::5")));
  EXPECT_FALSE(v6.contains(*parseIpLiteral("fd00:2::5")));
  EXPECT_FALSE(v6.contains(*parseIpLiteral("10.20.0.1")));
  EXPECT_EQ(parseCidr("127.0.0.1").value().prefix, 32);
  EXPECT_TRUE(parseCidr("0.0.0.0/0").value().contains(*parseIpLiteral("1.2.3.4")));
}

TEST(Cidr, RejectsBadInput) {
  EXPECT_NE(parseCidr("10.1.2.3/8").error().find("did you mean 10.0.0.0/8"), std::string::npos);
  EXPECT_FALSE(parseCidr("10.0.0.0/33"));
  EXPECT_FALSE(parseCidr("10.0.0.0/"));
  EXPECT_FALSE(parseCidr("10.0.0.0/x"));
  EXPECT_FALSE(parseCidr("0x0a.0.0.0/8"));  // CIDRs are written plainly
  EXPECT_FALSE(parseCidr("example.com/8"));
}

}  // namespace
}  // namespace sluice::policy
