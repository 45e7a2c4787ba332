// `action: ask`: the loader (ask.timeout and its errors with FILE:LINE:COL) and the matcher
// (deny > ask > allow in either order; where an ask rule asks: the CONNECT of a passthrough
// tunnel, each request under tls: inspect or plain HTTP; Query::approved_rule; the address
// phase; the DNS question). `sluice policy explain | test` with decision ask: tests/cli.
#include <gtest/gtest.h>

#include <chrono>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::policy {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kHead =
    "apiVersion: sluice/v1\n"
    "kind: Workflow\n"
    "name: wf\n"
    "egress:\n"
    "  rules:\n";

std::string problems(const std::string& rules) {
  auto w = parseWorkflow(std::string(kHead) + rules, "p.yaml");
  if (w) return "<loaded>";
  return w.error().str();
}

std::shared_ptr<const Matcher> compileRules(const std::string& rules) {
  auto w = parseWorkflow(std::string(kHead) + rules, "p.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  if (!w) return nullptr;
  return Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
}

Target target(std::string_view host, std::uint16_t port) { return makeTarget(host, port).value(); }

// ---------------------------------------------------------------------------------------------
// Loader

TEST(AskLoader, ActionAskAndItsTimeout) {
  auto w = parseWorkflow(std::string(kHead) +
                             "    - id: gate\n      action: ask\n      hosts: [a.example]\n"
                             "      ask: {timeout: 2s}\n"
                             "    - id: plain\n      action: ask\n      hosts: [b.example]\n",
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  ASSERT_EQ(w->rules.size(), 2u);
  EXPECT_EQ(w->rules[0].action, Action::kAsk);
  EXPECT_EQ(w->rules[0].ask_timeout, 2000ms);
  EXPECT_EQ(w->rules[1].action, Action::kAsk);
  EXPECT_EQ(w->rules[1].ask_timeout, 60000ms);  // the default
  EXPECT_EQ(actionName(w->rules[0].action), "ask");
  // The largest timeout allowed is 24h exactly.
  EXPECT_EQ(problems("    - id: g\n      action: ask\n      hosts: [a.example]\n"
                     "      ask: {timeout: 24h}\n"),
            "<loaded>");
}

TEST(AskLoader, AskOnAnAllowOrDenyRuleIsAnError) {
  EXPECT_EQ(problems("    - id: r1\n      action: allow\n      hosts: [a.example]\n"
                     "      ask: {timeout: 2s}\n"),
            "p.yaml:9:12: 'ask' on allow rule 'r1' has no effect (only action: ask waits for an "
            "approver)\n");
  EXPECT_EQ(problems("    - id: r6\n      action: deny\n      hosts: [a.example]\n"
                     "      ask:\n        timeout: 1s\n"),
            "p.yaml:10:9: 'ask' on deny rule 'r6' has no effect (only action: ask waits for an "
            "approver)\n");
}

TEST(AskLoader, BadTimeoutsAndKeysNameTheirPlace) {
  auto with = [](const std::string& ask) {
    return problems("    - id: g\n      action: ask\n      hosts: [a.example]\n      ask: " + ask +
                    "\n");
  };
  EXPECT_EQ(with("{timeout: 0s}"), "p.yaml:9:22: ask.timeout must be more than zero\n");
  EXPECT_EQ(with("{timeout: 0}"), "p.yaml:9:22: ask.timeout must be more than zero\n");
  EXPECT_EQ(with("{timeout: 25h}"),
            "p.yaml:9:22: ask.timeout must be more than 0 and at most 24h\n");
  EXPECT_EQ(with("{timeout: 2d}"),
            "p.yaml:9:22: ask.timeout must be more than 0 and at most 24h\n");
  EXPECT_EQ(with("{timeout: soon}"),
            "p.yaml:9:22: ask.timeout: bad duration 'soon' (expected e.g. 30s, 2m, 1h)\n");
  EXPECT_EQ(with("{timeout: 1s, tmeout: 2}"),
            "p.yaml:9:26: unknown key 'tmeout' in ask (did you mean 'timeout'?)\n");
  EXPECT_EQ(with("5"), "p.yaml:9:12: ask must be a mapping\n");
  EXPECT_EQ(problems("    - id: g\n      action: maybe\n      hosts: [a.example]\n"),
            "p.yaml:7:15: action must be 'allow', 'deny' or 'ask' (got 'maybe')\n");
}

// ---------------------------------------------------------------------------------------------
// Matcher

TEST(AskMatcher, DenyBeatsAskBeatsAllowInEitherOrder) {
  for (bool ask_first : {true, false}) {
    std::string ask = "    - {id: gate, action: ask, hosts: [\"*.example.com\"]}\n";
    std::string allow = "    - {id: ok, action: allow, hosts: [\"*.example.com\"]}\n";
    std::string deny = "    - {id: no, action: deny, hosts: [bad.example.com]}\n";
    auto m = compileRules(ask_first ? deny + ask + allow : allow + ask + deny);
    ASSERT_TRUE(m);
    auto d = m->decide({target("api.example.com", 443), Visibility::kTunnel});
    EXPECT_FALSE(d.allowed) << ask_first;
    EXPECT_TRUE(d.ask) << ask_first;
    EXPECT_EQ(d.rule_id, "gate");
    EXPECT_EQ(d.reason, Reason::kApprovalRequired);
    EXPECT_EQ(decisionName(d), "ask");
    auto bad = m->decide({target("bad.example.com", 443), Visibility::kTunnel});
    EXPECT_FALSE(bad.allowed);
    EXPECT_FALSE(bad.ask);
    EXPECT_EQ(bad.rule_id, "no");
    EXPECT_EQ(decisionName(bad), "deny");
  }
  // An allow rule for a host no ask rule names still allows.
  auto m = compileRules(
      "    - {id: gate, action: ask, hosts: [a.example.com]}\n"
      "    - {id: ok, action: allow, hosts: [\"*.example.com\"]}\n");
  auto d = m->decide({target("b.example.com", 443), Visibility::kTunnel});
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.ask);
  EXPECT_EQ(d.rule_id, "ok");
}

TEST(AskMatcher, PassthroughAsksAtConnectInspectPerRequest) {
  auto m = compileRules(
      "    - {id: pass, action: ask, hosts: [p.example], ports: [443]}\n"
      "    - {id: insp, action: ask, hosts: [i.example], ports: [443], tls: inspect}\n"
      "    - {id: web, action: ask, hosts: [h.example], ports: [80]}\n");
  ASSERT_TRUE(m);
  auto p = target("p.example", 443);
  auto d = m->decide({p, Visibility::kTunnel});
  EXPECT_TRUE(d.ask);
  EXPECT_EQ(d.rule_id, "pass");
  EXPECT_EQ(d.tls, TlsMode::kPassthrough);

  // tls: inspect: the CONNECT is allowed (the proxy will see each request), each request asks.
  auto i = target("i.example", 443);
  d = m->decide({i, Visibility::kTunnel});
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.ask);
  EXPECT_EQ(d.tls, TlsMode::kInspect);
  HttpRequest get{"GET", "/a", ""};
  d = m->decide({i, Visibility::kTunnel, &get});
  EXPECT_TRUE(d.ask);
  EXPECT_EQ(d.rule_id, "insp");
  EXPECT_NE(d.detail.find("GET i.example:443/a"), std::string::npos) << d.detail;

  // Plain HTTP: the connection acts as an allow, each request asks.
  auto h = target("h.example", 80);
  d = m->decide({h, Visibility::kPlainHttp});
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.ask);
  HttpRequest post{"POST", "/x", ""};
  d = m->decide({h, Visibility::kPlainHttp, &post});
  EXPECT_TRUE(d.ask);
  EXPECT_EQ(d.rule_id, "web");
}

TEST(AskMatcher, ApprovedRuleAllowsOnlyThatRule) {
  auto m = compileRules(
      "    - {id: one, action: ask, hosts: [a.example]}\n"
      "    - {id: two, action: ask, hosts: [b.example]}\n"
      "    - {id: both, action: ask, hosts: [c.example]}\n"
      "    - {id: both2, action: ask, hosts: [c.example]}\n");
  ASSERT_TRUE(m);
  auto a = target("a.example", 443);
  auto b = target("b.example", 443);
  Query qa{a, Visibility::kTunnel};
  qa.approved_rule = "one";
  auto d = m->decide(qa);
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.ask);
  EXPECT_EQ(d.rule_id, "one");
  EXPECT_EQ(d.reason, Reason::kAllowed);

  Query qb{b, Visibility::kTunnel};
  qb.approved_rule = "one";  // an approval for another rule is not one for this
  d = m->decide(qb);
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.ask);
  EXPECT_EQ(d.rule_id, "two");

  // Two ask rules for one host: the first asks; approving the second changes nothing.
  auto c = target("c.example", 443);
  Query qc{c, Visibility::kTunnel};
  qc.approved_rule = "both2";
  d = m->decide(qc);
  EXPECT_TRUE(d.ask);
  EXPECT_EQ(d.rule_id, "both");
  qc.approved_rule = "both";
  EXPECT_TRUE(m->decide(qc).allowed);
}

TEST(AskMatcher, ApprovalNeverOverridesADeny) {
  auto m = compileRules(
      "    - {id: gate, action: ask, hosts: [\"*.example.com\"]}\n"
      "    - {id: no, action: deny, hosts: [bad.example.com]}\n");
  auto t = target("bad.example.com", 443);
  Query q{t, Visibility::kTunnel};
  q.approved_rule = "gate";
  auto d = m->decide(q);
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.ask);
  EXPECT_EQ(d.rule_id, "no");
}

TEST(AskMatcher, AddressPhaseWithCidrs) {
  auto m = compileRules(
      "    - {id: lan, action: ask, hosts: [svc.internal], allow_private: true,"
      " cidrs: [\"10.1.0.0/16\"]}\n"
      "    - {id: net, action: ask, allow_private: true, cidrs: [\"192.0.2.0/24\"]}\n");
  ASSERT_TRUE(m);
  auto t = target("svc.internal", 443);
  auto in = parseIpLiteral("10.1.2.3").value();
  auto out = parseIpLiteral("10.2.0.1").value();
  auto meta = parseIpLiteral("169.254.169.254").value();
  auto d = m->decide({t, Visibility::kTunnel, nullptr, &in});
  EXPECT_TRUE(d.ask);
  EXPECT_EQ(d.rule_id, "lan");
  EXPECT_NE(d.detail.find("10.1.2.3"), std::string::npos) << d.detail;
  d = m->decide({t, Visibility::kTunnel, nullptr, &out});
  EXPECT_FALSE(d.ask);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kAddressNotInCidrs);
  d = m->decide({t, Visibility::kTunnel, nullptr, &meta});
  EXPECT_FALSE(d.ask);
  EXPECT_FALSE(d.allowed);
  // An IP literal in an ask rule's cidrs asks.
  auto lit = target("192.0.2.7", 443);
  auto addr = parseIpLiteral("192.0.2.7").value();
  d = m->decide({lit, Visibility::kTunnel, nullptr, &addr});
  EXPECT_TRUE(d.ask) << d.detail;
  EXPECT_EQ(d.rule_id, "net");
  Query approved{lit, Visibility::kTunnel, nullptr, &addr};
  approved.approved_rule = "net";
  EXPECT_TRUE(m->decide(approved).allowed);
}

TEST(AskMatcher, DnsAnswersANameOnlyAnAskRuleNames) {
  auto m = compileRules(
      "    - {id: gate, action: ask, hosts: [only-ask.example]}\n"
      "    - {id: no, action: deny, hosts: [blocked.example]}\n"
      "    - {id: gate2, action: ask, hosts: [blocked.example]}\n");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->nameMayBeAllowed("only-ask.example"));
  auto ans = m->nameAnswer("only-ask.example");
  ASSERT_NE(ans.rule, nullptr);
  EXPECT_EQ(ans.rule->id, "gate");
  EXPECT_FALSE(m->nameMayBeAllowed("blocked.example"));  // a deny still wins
  EXPECT_FALSE(m->nameMayBeAllowed("other.example"));
}

}  // namespace
}  // namespace sluice::policy
