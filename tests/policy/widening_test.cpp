// policy::widens: a live update by a non-approver may only narrow. Conservative: a narrowing
// may be called a widening, never the reverse.
#include "sluice/policy/widening.hpp"

#include <gtest/gtest.h>

#include "sluice/policy/loader.hpp"

namespace sluice::policy {
namespace {

Workflow load(const std::string& rules, const std::string& limits = "") {
  auto w = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n" + limits + "  rules:\n" + rules,
      "p.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  return w ? std::move(*w) : Workflow{};
}

const std::string kBase =
    "    - {id: api, action: allow, hosts: [api.test, '*.cdn.test'], ports: [443, 8000-8100],"
    " tls: inspect, methods: [GET, POST], paths: ['/v1/*']}\n"
    "    - {id: no-admin, action: deny, hosts: [api.test], paths: ['/v1/admin/*']}\n"
    "    - {id: pay, action: ask, hosts: [pay.test], ports: [443]}\n";

TEST(Widening, TheSamePolicyAndNarrowerRulesDoNotWiden) {
  EXPECT_TRUE(widens(load(kBase), load(kBase)).empty());
  const auto narrower = load(
      "    - {id: api, action: allow, hosts: [api.test, img.cdn.test], ports: [443, 8001],"
      " tls: inspect, methods: [GET], paths: ['/v1/items/*']}\n"
      "    - {id: no-admin, action: deny, hosts: [api.test], paths: ['/v1/admin/*']}\n"
      "    - {id: pay, action: deny, hosts: [pay.test], ports: [443]}\n");
  EXPECT_TRUE(widens(load(kBase), narrower).empty());
}

TEST(Widening, EachWayOfAllowingMoreIsReported) {
  const std::vector<std::string> wider = {
      "hosts: [other.test], ports: [443], tls: inspect, methods: [GET], paths: ['/v1/x']",
      "hosts: [cdn.test], ports: [443], tls: inspect, methods: [GET], paths: ['/v1/x']",
      "hosts: [api.test], ports: [22], tls: inspect, methods: [GET], paths: ['/v1/x']",
      "hosts: [api.test], ports: [443], tls: passthrough",
      "hosts: [api.test], ports: [443], tls: inspect, methods: [DELETE], paths: ['/v1/x']",
      "hosts: [api.test], ports: [443], tls: inspect, methods: [GET]",
      "hosts: [api.test], ports: [443], tls: inspect, methods: [GET], paths: ['/v2/x']",
      "hosts: ['re:.*'], ports: [443], tls: inspect, methods: [GET], paths: ['/v1/x']",
  };
  for (const auto& w : wider) {
    auto next = load("    - {id: api, action: allow, " + w +
                     "}\n"
                     "    - {id: no-admin, action: deny, hosts: [api.test], paths: "
                     "['/v1/admin/*']}\n"
                     "    - {id: pay, action: ask, hosts: [pay.test], ports: [443]}\n");
    auto reasons = widens(load(kBase), next);
    ASSERT_EQ(reasons.size(), 1u) << w;
    EXPECT_NE(reasons[0].find("allow rule 'api'"), std::string::npos) << reasons[0];
  }
}

TEST(Widening, DroppingADenyOrAnAskOrAllowingWhatWasAskedWidens) {
  auto no_deny = load(
      "    - {id: api, action: allow, hosts: [api.test], ports: [443], tls: inspect,"
      " methods: [GET], paths: ['/v1/*']}\n"
      "    - {id: pay, action: ask, hosts: [pay.test], ports: [443]}\n");
  auto r = widens(load(kBase), no_deny);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("deny rule 'no-admin'"), std::string::npos);
  auto asked_now_allowed =
      load(kBase + "    - {id: pay2, action: allow, hosts: [pay.test]," + " ports: [443]}\n");
  r = widens(load(kBase), asked_now_allowed);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("allow rule 'pay2'"), std::string::npos);
}

TEST(Widening, SecretsAddressesAndLimits) {
  const std::string secret_rule =
      "    - {id: s, action: allow, hosts: [api.test], ports: [443], tls: inspect,"
      " inject: {headers: {Authorization: 'Bearer ${secret:A}'}}}\n";
  auto other_secret = secret_rule;
  other_secret.replace(other_secret.find("secret:A"), 8, "secret:B");
  EXPECT_TRUE(widens(load(secret_rule), load(secret_rule)).empty());
  EXPECT_EQ(widens(load(secret_rule), load(other_secret)).size(), 1u);

  const std::string ranged =
      "    - {id: m, action: allow, hosts: [m.test], cidrs: ['10.20.0.0/16'],"
      " allow_private: true}\n";
  auto inside = ranged;
  inside.replace(inside.find("10.20.0.0/16"), 12, "10.20.30.0/24");
  auto outside = ranged;
  outside.replace(outside.find("10.20.0.0/16"), 12, "10.0.0.0/8");
  EXPECT_TRUE(widens(load(ranged), load(inside)).empty());
  EXPECT_EQ(widens(load(ranged), load(outside)).size(), 1u);

  const std::string rule = "    - {id: a, action: allow, hosts: [api.test]}\n";
  auto lower = load(rule, "  limits: {max_requests: 10}\n");
  auto higher = load(rule, "  limits: {max_requests: 20}\n");
  EXPECT_TRUE(widens(higher, lower).empty());
  auto r = widens(lower, higher);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("max_requests"), std::string::npos);
}

// The edges of coverage: a name that only ends like a wildcard's domain, a cidrs-only rule
// (it matches IP literals) under a rule with hosts, allow_private added, the sandbox given a
// network it lacked.
TEST(Widening, SuffixesIpLiteralsPrivateAddressesAndTheNetwork) {
  const std::string cdn = "    - {id: c, action: allow, hosts: ['*.cdn.test'], ports: [443]}\n";
  const auto with_host = [](const std::string& h) {
    return load("    - {id: c, action: allow, hosts: ['" + h + "'], ports: [443]}\n");
  };
  EXPECT_TRUE(widens(load(cdn), with_host("a.b.cdn.test")).empty());
  EXPECT_TRUE(widens(load(cdn), with_host("*.img.cdn.test")).empty());
  EXPECT_EQ(widens(load(cdn), with_host("evilcdn.test")).size(), 1u);
  EXPECT_EQ(widens(load(cdn), with_host("*.evilcdn.test")).size(), 1u);

  const std::string named =
      "    - {id: m, action: allow, hosts: [m.test], cidrs: ['10.20.0.0/16'],"
      " allow_private: true}\n";
  EXPECT_EQ(widens(load(named), load("    - {id: m, action: allow, cidrs: ['10.20.0.0/24'],"
                                     " allow_private: true}\n"))
                .size(),
            1u);
  const std::string global_only =
      "    - {id: g, action: allow, hosts: [g.test], cidrs: ['10.20.0.0/16']}\n";
  auto now_private = global_only;
  now_private.replace(now_private.find("]}"), 2, "], allow_private: true}");
  EXPECT_TRUE(widens(load(global_only), load(global_only)).empty());
  EXPECT_EQ(widens(load(global_only), load(now_private)).size(), 1u);

  auto none = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: wf\nsandbox:\n  network: none\n", "n.yaml");
  ASSERT_TRUE(none) << none.error().str();
  EXPECT_TRUE(widens(*none, *none).empty());
  auto r = widens(*none, load(cdn));
  ASSERT_FALSE(r.empty());
  EXPECT_NE(r.back().find("sandbox.network"), std::string::npos) << r.back();
}

// A minted token's client secret goes to its token_url: a non-approver may not point the same
// secrets at another token endpoint (theirs), nor mint where the old rule injected nothing.
TEST(Widening, AMintedTokensEndpointIsPartOfItsSecrets) {
  // Both endpoints allowed (the loader wants a rule for each), in every version alike.
  const std::string auth =
      "    - {id: auth, action: allow, hosts: [auth.example.com, auth.attacker.test], ports: "
      "[443], tls: inspect, methods: [POST]}\n";
  const auto minting = [&](const std::string& token_url) {
    return load(auth +
                "    - id: t\n      action: allow\n      hosts: [api.test]\n      ports: [443]\n"
                "      tls: inspect\n      inject:\n        oauth2:\n"
                "          token_url: " +
                token_url +
                "\n          client_id: ${secret:client_id}\n"
                "          client_secret: ${secret:client_secret}\n");
  };
  const auto old = minting("https://auth.example.com/oauth/token");
  EXPECT_TRUE(widens(old, old).empty());
  EXPECT_EQ(widens(old, minting("https://auth.attacker.test/token")).size(), 1u);
  const auto plain =
      load(auth + "    - {id: t, action: allow, hosts: [api.test], ports: [443], tls: inspect}\n");
  EXPECT_TRUE(widens(old, plain).empty());
  EXPECT_EQ(widens(plain, old).size(), 1u);
}

}  // namespace
}  // namespace sluice::policy
