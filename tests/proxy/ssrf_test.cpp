// The SSRF guard as the proxy applies it: every spelling of loopback and of the metadata
// address through CONNECT and absolute-form, names that resolve to private addresses
// (rebinding shape), mixed answers, wildcard confusion, the proxy's own listener.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

using SsrfTest = ProxyFixture;

// Spellings of 127.0.0.1 (and other loopback/unspecified forms) a URL parser or inet_aton
// would accept. Each must be refused and reach nothing.
const char* const kLoopbackHosts[] = {
    "127.0.0.1",
    "2130706433",
    "0x7f.1",
    "0177.0.0.1",
    "127.1",
    "0x7f000001",
    "0x7F.0.0.1",
    "127.0.1",
    "017700000001",
    "127.000.000.001",
    "127.0.0.2",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
    "[::127.0.0.1]",
    "[64:ff9b::127.0.0.1]",
    "[2002:7f00:1::]",
    "0.0.0.0",
    "[::]",
    "0",
};

const char* const kMetadataHosts[] = {
    "169.254.169.254",          "2852039166",          "0xa9fea9fe",
    "0xa9.0xfe.0xa9.0xfe",      "0251.0376.0251.0376", "169.254.43518",
    "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]",  "[64:ff9b::a9fe:a9fe]",
};

void expectRefusedPrivate(const Response& r, const std::string& what) {
  EXPECT_EQ(r.status, 403) << what;
  EXPECT_EQ(r.header("x-sluice-reason"), "private_address") << what << "\n" << r.body;
}

TEST_F(SsrfTest, EveryLoopbackSpellingIsRefusedViaConnect) {
  for (const char* host : kLoopbackHosts) {
    std::string authority = std::string(host) + ":" + std::to_string(up_.echoPort());
    auto r = roundTrip(connectRequest(authority));
    expectRefusedPrivate(r, authority);
  }
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  auto conns = sink_->connections();
  ASSERT_EQ(conns.size(), std::size(kLoopbackHosts));
  for (const auto& e : conns) {
    EXPECT_EQ(e.decision, audit::Decision::kDeny) << e.host;
    EXPECT_EQ(e.kind, audit::ConnectionKind::kConnect);
    EXPECT_EQ(e.reason, "private_address") << e.host;
    EXPECT_EQ(e.rule_id, "any-ip") << e.host;
  }
  // Normalised: the audit row names the canonical address.
  EXPECT_EQ(conns[1].host, "127.0.0.1");
}

TEST_F(SsrfTest, EveryLoopbackSpellingIsRefusedViaAbsoluteForm) {
  for (const char* host : kLoopbackHosts) {
    std::string authority = std::string(host) + ":" + std::to_string(up_.httpPort());
    auto r = roundTrip(getRequest(authority, "/"));
    expectRefusedPrivate(r, authority);
  }
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
  EXPECT_EQ(sink_->requests().size(), std::size(kLoopbackHosts));
}

TEST_F(SsrfTest, EveryMetadataSpellingIsRefused) {
  for (const char* host : kMetadataHosts) {
    auto c = roundTrip(connectRequest(std::string(host) + ":80"));
    expectRefusedPrivate(c, std::string("CONNECT ") + host);
    auto g = roundTrip(getRequest(std::string(host) + ":80", "/latest/meta-data/"));
    expectRefusedPrivate(g, std::string("GET ") + host);
  }
  // IPv4 spellings are normalised to the canonical address in the audit row.
  for (const auto& e : sink_->connections()) {
    if (e.host.find(':') == std::string::npos) {
      EXPECT_EQ(e.host, "169.254.169.254");
    }
  }
}

TEST_F(SsrfTest, NameResolvingToLoopbackIsRefusedWithoutAllowPrivate) {
  // rebind.test is allowed by host, but resolves to 127.0.0.1 (the rebinding shape).
  auto c = roundTrip(connectRequest("rebind.test:" + std::to_string(up_.echoPort())));
  expectRefusedPrivate(c, "CONNECT rebind.test");
  auto g = roundTrip(getRequest("rebind.test:" + std::to_string(up_.httpPort()), "/"));
  expectRefusedPrivate(g, "GET rebind.test");
  auto m = roundTrip(connectRequest("metadata.test:80"));
  expectRefusedPrivate(m, "CONNECT metadata.test");
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
  auto row = sink_->waitConnection([](const auto& e) { return e.host == "rebind.test"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->rule_id, "public-names");
  EXPECT_EQ(row->reason, "private_address");
}

TEST_F(SsrfTest, OnePrivateAddressAmongPublicOnesRefusesTheName) {
  auto r = roundTrip(connectRequest("mixed.test:443"));
  expectRefusedPrivate(r, "mixed.test");
  EXPECT_NE(r.body.find("127.0.0.1"), std::string::npos) << r.body;
}

TEST_F(SsrfTest, AllowPrivateWithCidrsReachesTheVettedAddress) {
  // The positive control: the same loopback upstream is reachable under the rule that says
  // allow_private with cidrs.
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  EXPECT_EQ(c.readResponse().status, 200);
  EXPECT_EQ(up_.echoLog().accepted.load(), 1);
}

TEST_F(SsrfTest, WildcardConfusionHostsMatchNothing) {
  for (const char* host :
       {"example.com", "evil-example.com", "example.com.evil.test", "xexample.com", "example.co"}) {
    auto r = roundTrip(connectRequest(std::string(host) + ":443"));
    EXPECT_EQ(r.status, 403) << host;
    EXPECT_EQ(r.header("x-sluice-reason"), "no_matching_rule") << host;
    auto g = roundTrip(getRequest(std::string(host) + ":80", "/"));
    EXPECT_EQ(g.status, 403) << host;
  }
  // A real subdomain matches the rule; then the guard judges its address.
  auto sub = roundTrip(connectRequest("A.Example.COM.:443"));
  expectRefusedPrivate(sub, "a.example.com");
}

TEST_F(SsrfTest, TheProxyWillNotDialItself) {
  auto r = roundTrip(connectRequest("upstream.test:" + std::to_string(port_)));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "proxy_loop");
  auto g = roundTrip(getRequest("upstream.test:" + std::to_string(port_), "/"));
  EXPECT_EQ(g.status, 403);
  EXPECT_EQ(g.header("x-sluice-reason"), "proxy_loop");
  EXPECT_TRUE(sink_->waitConnection([](const auto& e) { return e.reason == "proxy_loop"; }));
}

}  // namespace
}  // namespace sluice::proxy::testing
