// Decisions: wildcards, deny over allow, ports, regexes, CIDRs, the SSRF address phase,
// request conditions and nearest-miss texts.
#include "sluice/policy/matcher.hpp"

#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"

namespace sluice::policy {
namespace {

std::shared_ptr<const Matcher> compileYaml(const std::string& rules) {
  std::string yaml = "apiVersion: sluice/v1\nkind: Workflow\nname: t\negress:\n  rules:\n" + rules;
  auto w = parseWorkflow(yaml, "t.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  if (!w) return nullptr;
  return Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
}

Target target(std::string_view host, std::uint16_t port) { return makeTarget(host, port).value(); }

Decision connect(const Matcher& m, std::string_view host, std::uint16_t port) {
  return m.decide({target(host, port), Visibility::kTunnel});
}

// A CONNECT to `t` dialled at `addr` (every phase in one call, as the proxy asks).
Decision connectAt(const Matcher& m, const Target& t, const IpAddress& addr,
                   Visibility v = Visibility::kTunnel) {
  return m.decide({t, v, nullptr, &addr});
}

// A request on a connection to `t` (optionally dialled at `addr`).
Decision request(const Matcher& m, const Target& t, std::string_view method, std::string_view path,
                 const IpAddress* addr = nullptr) {
  HttpRequest r{std::string(method), std::string(path), ""};
  return m.decide({t, Visibility::kPlainHttp, &r, addr});
}

class WildcardTest : public ::testing::Test {
 protected:
  std::shared_ptr<const Matcher> m_ =
      compileYaml("    - {id: wild, action: allow, hosts: [\"*.example.com\"], ports: [443]}\n");
};

TEST_F(WildcardTest, SubdomainsOnly) {
  EXPECT_TRUE(connect(*m_, "api.example.com", 443).allowed);
  EXPECT_TRUE(connect(*m_, "a.b.example.com", 443).allowed);
  EXPECT_TRUE(connect(*m_, "API.EXAMPLE.COM.", 443).allowed);
  for (auto host : {"example.com", "evil-example.com", "example.com.evil.net", "xexample.com",
                    "example.co", "example.com.", "com"}) {
    EXPECT_FALSE(connect(*m_, host, 443).allowed) << host;
  }
}

TEST_F(WildcardTest, BareDomainMissExplainsTheWildcard) {
  auto d = connect(*m_, "example.com", 443);
  EXPECT_EQ(d.reason, Reason::kNoMatchingRule);
  EXPECT_EQ(d.nearest_miss,
            "rule wild has *.example.com, which matches subdomains of example.com only, not "
            "example.com itself");
}

TEST(Matcher, ExactHostIsCaseInsensitive) {
  auto m = compileYaml("    - {id: a, action: allow, hosts: [Pypi.Org], ports: [443]}\n");
  EXPECT_TRUE(connect(*m, "PYPI.org.", 443).allowed);
  EXPECT_FALSE(connect(*m, "pypi.org.evil.net", 443).allowed);
  EXPECT_FALSE(connect(*m, "www.pypi.org", 443).allowed);
}

TEST(Matcher, DenyBeatsAllowWhateverTheOrder) {
  auto m = compileYaml(
      "    - {id: allow-all, action: allow, hosts: [\"*.example.com\"]}\n"
      "    - {id: block, action: deny, hosts: [bad.example.com]}\n");
  auto d = connect(*m, "bad.example.com", 443);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kDeniedByRule);
  EXPECT_EQ(d.rule_id, "block");
  EXPECT_TRUE(connect(*m, "good.example.com", 443).allowed);
}

TEST(Matcher, DefaultDenyWithNoRuleMatching) {
  auto m = compileYaml("    - {id: a, action: allow, hosts: [a.example]}\n");
  auto d = connect(*m, "b.example", 443);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kNoMatchingRule);
  EXPECT_TRUE(d.rule_id.empty());
  EXPECT_EQ(d.detail, "no rule matches host b.example");
}

TEST(Matcher, PortsAndRanges) {
  auto m = compileYaml(
      "    - {id: api, action: allow, hosts: [api.example], ports: [443, \"8000-8100\"]}\n");
  EXPECT_TRUE(connect(*m, "api.example", 443).allowed);
  EXPECT_TRUE(connect(*m, "api.example", 8000).allowed);
  EXPECT_TRUE(connect(*m, "api.example", 8100).allowed);
  auto d = connect(*m, "api.example", 8101);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kPortNotAllowed);
  EXPECT_EQ(d.rule_id, "api");
  EXPECT_EQ(d.nearest_miss,
            "rule api matched host api.example but port 8101 is not in [443, 8000-8100]");
  EXPECT_FALSE(connect(*m, "api.example", 80).allowed);
}

TEST(Matcher, RegexHostsAreAnchoredAndCaseInsensitive) {
  auto m = compileYaml(
      "    - {id: re, action: allow, hosts: [\"re:[a-z]+\\\\.svc\\\\.example\"], ports: [443]}\n");
  EXPECT_TRUE(connect(*m, "abc.svc.example", 443).allowed);
  EXPECT_TRUE(connect(*m, "ABC.svc.example", 443).allowed);
  EXPECT_FALSE(connect(*m, "abc.svc.example.evil.net", 443).allowed);
  EXPECT_FALSE(connect(*m, "x.abc.svc.example", 443).allowed);
  EXPECT_FALSE(connect(*m, "a1.svc.example", 443).allowed);
}

TEST(Matcher, IpLiteralsMatchOnlyCidrRules) {
  auto m = compileYaml(
      "    - {id: by-name, action: allow, hosts: [\"re:.*\"], ports: [443]}\n"
      "    - {id: v4, action: allow, cidrs: [\"203.0.112.0/24\"], ports: [443]}\n"
      "    - {id: v6, action: allow, cidrs: [\"2606:4700::/32\"], ports: [443]}\n");
  // A catch-all host regex never matches an IP literal, in any spelling.
  for (auto s : {"127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "[::1]",
                 "[::ffff:127.0.0.1]", "0xa9fea9fe"}) {
    auto d = connect(*m, s, 443);
    EXPECT_FALSE(d.allowed) << s;
    EXPECT_EQ(d.reason, Reason::kIpLiteralNeedsCidrs) << s;
  }
  EXPECT_EQ(connect(*m, "203.0.112.9", 443).rule_id, "v4");
  EXPECT_EQ(connect(*m, "3405803529", 443).rule_id, "v4");            // 203.0.112.9 as a number
  EXPECT_EQ(connect(*m, "[::ffff:203.0.112.9]", 443).rule_id, "v4");  // mapped form
  EXPECT_EQ(connect(*m, "[2606:4700::1]", 443).rule_id, "v6");
  EXPECT_FALSE(connect(*m, "[2606:4701::1]", 443).allowed);
  EXPECT_TRUE(connect(*m, "anything.example", 443).allowed);
}

TEST(Matcher, AddressPhaseRefusesNonGlobalAddresses) {
  auto m = compileYaml("    - {id: pub, action: allow, hosts: [api.example], ports: [443]}\n");
  auto t = target("api.example", 443);
  auto c = m->decide({t, Visibility::kTunnel});
  ASSERT_TRUE(c.allowed);
  EXPECT_TRUE(connectAt(*m, t, *parseIpLiteral("93.184.216.34")).allowed);
  for (auto s :
       {"127.0.0.1", "10.0.0.1", "169.254.169.254", "100.64.1.1", "0.0.0.0", "::1", "fd00::1",
        "fe80::1", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "224.0.0.1"}) {
    auto d = connectAt(*m, t, *parseIpLiteral(s));
    EXPECT_FALSE(d.allowed) << s;
    EXPECT_EQ(d.reason, Reason::kPrivateAddress) << s;
  }
  auto d = connectAt(*m, t, *parseIpLiteral("127.0.0.1"));
  EXPECT_EQ(d.detail,
            "api.example resolves to 127.0.0.1, a loopback address; reaching it needs a rule with "
            "allow_private: true and cidrs containing it");
  EXPECT_EQ(d.nearest_miss, "rule pub matched api.example but does not set allow_private: true");
}

TEST(Matcher, AnAllowAtAnAddressIsExplainedByTheAddressPhase) {
  auto m = compileYaml(
      "    - {id: local, action: allow, hosts: [svc.example], ports: [8080],\n"
      "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n");
  auto t = target("svc.example", 8080);
  const auto addr = *parseIpLiteral("127.0.0.9");
  EXPECT_EQ(request(*m, t, "GET", "/a").detail, "rule local allows GET svc.example:8080/a");
  auto d = request(*m, t, "GET", "/a", &addr);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.detail, "rule local allows svc.example at 127.0.0.9 (loopback, allow_private)");
  EXPECT_EQ(connectAt(*m, t, addr).detail, d.detail);
  EXPECT_EQ(connect(*m, "svc.example", 8080).detail,
            "rule local allows svc.example:8080 (tls: passthrough)");
}

TEST(Matcher, AllowPrivateNeedsTheAddressInCidrs) {
  auto m = compileYaml(
      "    - {id: stats, action: allow, hosts: [stats.internal.example], ports: [443],\n"
      "       allow_private: true, cidrs: [\"10.20.0.0/16\"]}\n");
  auto t = target("stats.internal.example", 443);
  auto c = m->decide({t, Visibility::kTunnel});
  ASSERT_TRUE(c.allowed);
  EXPECT_TRUE(connectAt(*m, t, *parseIpLiteral("10.20.3.4")).allowed);
  auto d = connectAt(*m, t, *parseIpLiteral("10.21.0.1"));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kAddressNotInCidrs);
  EXPECT_EQ(d.rule_id, "stats");
  auto lo = connectAt(*m, t, *parseIpLiteral("127.0.0.1"));
  EXPECT_FALSE(lo.allowed);
  EXPECT_EQ(lo.reason, Reason::kAddressNotInCidrs);
  // With both hosts and cidrs, even a global address must lie in cidrs.
  auto g = connectAt(*m, t, *parseIpLiteral("93.184.216.34"));
  EXPECT_FALSE(g.allowed);
  EXPECT_EQ(g.reason, Reason::kAddressNotInCidrs);
  EXPECT_EQ(g.nearest_miss,
            "rule stats matched host stats.internal.example but 93.184.216.34 is not in "
            "[10.20.0.0/16]");
}

TEST(Matcher, LoopbackLiteralNeedsAllowPrivate) {
  auto m = compileYaml(
      "    - {id: lo, action: allow, cidrs: [\"127.0.0.0/8\"], ports: [8080]}\n"
      "    - {id: lo-ok, action: allow, cidrs: [\"127.0.0.0/8\"], ports: [9090],\n"
      "       allow_private: true}\n");
  auto t = target("127.0.0.1", 8080);
  auto c = m->decide({t, Visibility::kTunnel});
  ASSERT_TRUE(c.allowed);
  EXPECT_FALSE(connectAt(*m, t, *t.ip).allowed);
  auto t2 = target("0x7f.1", 9090);
  auto c2 = m->decide({t2, Visibility::kTunnel});
  EXPECT_TRUE(connectAt(*m, t2, *t2.ip).allowed);
}

TEST(Matcher, DenyCidrsApplyToResolvedAddresses) {
  auto m = compileYaml(
      "    - {id: any, action: allow, hosts: [\"*.example.org\"]}\n"
      "    - {id: no-corp, action: deny, cidrs: [\"198.51.99.0/24\"]}\n");
  auto t = target("a.example.org", 443);
  auto c = m->decide({t, Visibility::kTunnel});
  ASSERT_TRUE(c.allowed);
  auto d = connectAt(*m, t, *parseIpLiteral("198.51.99.7"));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule_id, "no-corp");
  EXPECT_TRUE(connectAt(*m, t, *parseIpLiteral("198.51.98.7")).allowed);
}

TEST(Matcher, DenyCidrsWithMethodsRefuseOnlyThoseMethods) {
  auto m = compileYaml(
      "    - {id: lan-api, action: allow, hosts: [a.example], ports: [80], allow_private: true,\n"
      "       cidrs: [\"10.0.0.0/8\"]}\n"
      "    - {id: no-post-lan, action: deny, hosts: [a.example], ports: [80],\n"
      "       cidrs: [\"10.1.0.0/16\"], methods: [POST]}\n");
  auto t = target("a.example", 80);
  auto ip = *parseIpLiteral("10.1.1.1");
  auto get = request(*m, t, "GET", "/x", &ip);
  EXPECT_TRUE(get.allowed) << get.detail;
  auto post = request(*m, t, "POST", "/x", &ip);
  EXPECT_FALSE(post.allowed);
  EXPECT_EQ(post.rule_id, "no-post-lan");
  // At connect time (no request yet) the conditional deny cannot apply.
  EXPECT_TRUE(connectAt(*m, t, ip, Visibility::kPlainHttp).allowed);
}

TEST(Matcher, StarvedRegexSetFallsBackWithoutDroppingDenyRules) {
  // A budget far too small for the set: it fails to compile (or its DFA runs out while
  // matching); every re: rule, deny rules first of all, must still be found.
  std::string yaml =
      "apiVersion: sluice/v1\nkind: Workflow\nname: t\negress:\n  rules:\n"
      "    - {id: allow-victim, action: allow, hosts: [\"re:victim\\\\.example\\\\.com\"]}\n"
      "    - {id: deny-victim, action: deny, hosts: [\"re:vic.*\\\\.example\\\\.com\"]}\n"
      "    - {id: other, action: allow, hosts: "
      "[\"re:[a-z]{1,40}-[0-9]{1,40}\\\\.example\\\\.org\"]}\n";
  auto w = parseWorkflow(yaml, "t.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto m = Matcher::compile(std::make_shared<const Workflow>(std::move(*w)), 1024);
  auto d = connect(*m, "victim.example.com", 443);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule_id, "deny-victim");
  EXPECT_EQ(connect(*m, "abc-123.example.org", 443).rule_id, "other");
  EXPECT_FALSE(connect(*m, "abc.example.org", 443).allowed);
}

TEST(Matcher, RegexBudgetNeverDropsDenyRules) {
  // Enough large regexes to overflow RE2::Set's default DFA budget.
  std::string rules;
  for (int i = 0; i < 400; ++i) {
    rules += "    - {id: r" + std::to_string(i) + ", action: allow, hosts: [\"re:h" +
             std::to_string(i) + "-[a-z0-9]{1,40}-[a-z]{1,40}\\\\.zone" + std::to_string(i) +
             "\\\\.example\\\\.org\"], ports: [443]}\n";
  }
  rules += "    - {id: allow-victim, action: allow, hosts: [\"re:victim\\\\.example\\\\.com\"]}\n";
  rules += "    - {id: deny-victim, action: deny, hosts: [\"re:vic.*\\\\.example\\\\.com\"]}\n";
  auto m = compileYaml(rules);
  ASSERT_TRUE(m);
  auto d = connect(*m, "victim.example.com", 443);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule_id, "deny-victim");
  EXPECT_EQ(connect(*m, "h7-abc-def.zone7.example.org", 443).rule_id, "r7");
}

TEST(Matcher, RequestConditions) {
  auto m = compileYaml(
      "    - id: stats\n      action: allow\n      hosts: [stats.example]\n      ports: [443]\n"
      "      tls: inspect\n      methods: [GET, POST]\n      paths: [\"/v1/*\", \"re:/health\"]\n");
  auto t = target("stats.example", 443);
  auto c = m->decide({t, Visibility::kTunnel});
  ASSERT_TRUE(c.allowed);
  EXPECT_EQ(c.tls, TlsMode::kInspect);
  EXPECT_TRUE(request(*m, t, "GET", "/v1/users/1").allowed);
  EXPECT_TRUE(request(*m, t, "POST", "/health").allowed);
  auto dm = request(*m, t, "DELETE", "/v1/x");
  EXPECT_EQ(dm.reason, Reason::kMethodNotAllowed);
  EXPECT_EQ(dm.nearest_miss,
            "rule stats matched stats.example:443 but method DELETE is not in [GET, POST]");
  auto dp = request(*m, t, "GET", "/v2/x");
  EXPECT_EQ(dp.reason, Reason::kPathNotAllowed);
  EXPECT_EQ(dp.nearest_miss,
            "rule stats matched stats.example:443 and method GET but path /v2/x does not match "
            "[/v1/*, re:/health]");
  EXPECT_FALSE(request(*m, t, "GET", "/healthz").allowed);  // regex is anchored
}

TEST(Matcher, ConditionalAllowNeverGrantsAPassthroughTunnel) {
  auto m = compileYaml("    - {id: get-only, action: allow, hosts: [a.example], methods: [GET]}\n");
  auto d = connect(*m, "a.example", 443);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kInspectionRequired);
  // Plain HTTP requests are visible, so the rule applies to them.
  auto t = target("a.example", 80);
  EXPECT_TRUE(request(*m, t, "GET", "/").allowed);
  EXPECT_FALSE(request(*m, t, "POST", "/").allowed);
}

TEST(Matcher, ConditionalDenyAppliesToVisibleRequests) {
  auto m = compileYaml(
      "    - {id: pypi, action: allow, hosts: [\"*.pythonhosted.org\"], ports: [80, 443]}\n"
      "    - {id: no-uploads, action: deny, hosts: [\"*.pythonhosted.org\"],\n"
      "       methods: [PUT, POST]}\n");
  auto t = target("files.pythonhosted.org", 80);
  auto d = request(*m, t, "POST", "/upload");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule_id, "no-uploads");
  EXPECT_TRUE(request(*m, t, "GET", "/pkg.whl").allowed);
  // A passthrough tunnel carries no visible requests: the conditional deny cannot apply.
  EXPECT_TRUE(connect(*m, "files.pythonhosted.org", 443).allowed);
}

TEST(Matcher, InspectingDenyRuleForcesInspection) {
  auto m = compileYaml(
      "    - {id: pypi, action: allow, hosts: [\"*.pythonhosted.org\"], ports: [443]}\n"
      "    - {id: no-uploads, action: deny, hosts: [\"*.pythonhosted.org\"], ports: [443],\n"
      "       tls: inspect, methods: [POST]}\n");
  auto c = connect(*m, "files.pythonhosted.org", 443);
  EXPECT_TRUE(c.allowed);
  EXPECT_EQ(c.tls, TlsMode::kInspect);
  auto t = target("files.pythonhosted.org", 443);
  EXPECT_FALSE(request(*m, t, "POST", "/").allowed);
}

TEST(Matcher, FurthestNearMissWins) {
  auto m = compileYaml(
      "    - {id: port-miss, action: allow, hosts: [x.example], ports: [8443]}\n"
      "    - {id: method-miss, action: allow, hosts: [x.example], ports: [80], methods: [GET]}\n");
  auto d = request(*m, target("x.example", 80), "PUT", "/");
  EXPECT_EQ(d.rule_id, "method-miss");
  EXPECT_EQ(d.reason, Reason::kMethodNotAllowed);
}

TEST(Matcher, ManyRulesStillExact) {
  std::string rules;
  for (int i = 0; i < 500; ++i) {
    rules += "    - {id: r" + std::to_string(i) + ", action: allow, hosts: [h" + std::to_string(i) +
             ".example, \"*.w" + std::to_string(i) + ".example\"], ports: [443]}\n";
  }
  auto m = compileYaml(rules);
  EXPECT_EQ(connect(*m, "h321.example", 443).rule_id, "r321");
  EXPECT_EQ(connect(*m, "a.w42.example", 443).rule_id, "r42");
  EXPECT_FALSE(connect(*m, "h500.example", 443).allowed);
  EXPECT_FALSE(connect(*m, "w42.example", 443).allowed);
}

TEST(Matcher, ReasonNamesAreStable) {
  EXPECT_EQ(reasonName(Reason::kAllowed), "allowed");
  EXPECT_EQ(reasonName(Reason::kNoMatchingRule), "no_matching_rule");
  EXPECT_EQ(reasonName(Reason::kPrivateAddress), "private_address");
  EXPECT_EQ(reasonName(Reason::kInspectionRequired), "inspection_required");
}

}  // namespace
}  // namespace sluice::policy
