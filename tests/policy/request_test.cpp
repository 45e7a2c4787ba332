// The canonical request: every spelling that means the same path comes out as one form, and
// every spelling whose meaning depends on who decodes it is refused with its own reason.
#include "sluice/policy/request.hpp"

#include <gtest/gtest.h>

#include "sluice/policy/explain.hpp"
#include "sluice/policy/loader.hpp"

namespace sluice::policy {
namespace {

std::string canon(std::string_view target) {
  auto r = canonicalRequest("GET", target);
  return r ? r->target() : "ERROR:" + std::string(reasonName(r.error().reason));
}

TEST(CanonicalRequest, RemovesDotSegmentsAndEmptySegments) {
  EXPECT_EQ(canon("/v1/../admin/x"), "/admin/x");
  EXPECT_EQ(canon("/v1/./admin/x"), "/v1/admin/x");
  EXPECT_EQ(canon("/v1//admin/x"), "/v1/admin/x");
  EXPECT_EQ(canon("/v1/ok.txt;/../../admin/x"), "/admin/x");
  EXPECT_EQ(canon("/../../etc/passwd"), "/etc/passwd");  // never above the root
  EXPECT_EQ(canon("/a/b/.."), "/a/");
  EXPECT_EQ(canon("/a/b/."), "/a/b/");
  EXPECT_EQ(canon("/a/b/"), "/a/b/");
  EXPECT_EQ(canon("/"), "/");
  EXPECT_EQ(canon("//"), "/");
  EXPECT_EQ(canon("/.."), "/");
}

TEST(CanonicalRequest, DecodesUnreservedEscapesOnly) {
  EXPECT_EQ(canon("/v1/%61dmin/x"), "/v1/admin/x");
  EXPECT_EQ(canon("/%7euser/%2d%5f%2E%7e"), "/~user/-_.~");  // (a trailing "." is refused)
  EXPECT_EQ(canon("/a%20b/%c3%a9"), "/a%20b/%C3%A9");        // reserved/other: kept, upper-case hex
  EXPECT_EQ(canon("/a?b=%2f&c=..%2F"), "/a?b=%2f&c=..%2F");  // the query is not rewritten
}

TEST(CanonicalRequest, RefusesAmbiguousSpellings) {
  for (const char* t :
       {"/v1/%2e%2e/admin/x", "/v1/.%2e/x", "/v1/%2E/x", "/v1/..%2fadmin/x", "/v1/%2F", "/v1/a%5cb",
        "/v1/a\\b", "/v1/..;/admin", "/v1/.;x/y", "/v1/%00", "/v1/%0a", "/v1/%7F"}) {
    auto r = canonicalRequest("GET", t);
    ASSERT_FALSE(r) << t << " -> " << r->target();
    EXPECT_EQ(r.error().reason, Reason::kAmbiguousTarget) << t << ": " << r.error().detail;
  }
}

// Spellings that some upstreams read differently from the rule's author.
TEST(CanonicalRequest, RefusesSpellingsUpstreamsDecodeDifferently) {
  for (const char* t : {"/v1/%C0%AE%C0%AE/admin",  // overlong '.' (a lax UTF-8 decoder reads '..')
                        "/v1/%c0%af",              // overlong '/'
                        "/v1/%E0%80%AE",           // overlong '.' in three bytes
                        "/v1/%F0%80%80%AE",        // and in four
                        "/v1/%ff",                 // not UTF-8 at all
                        "/v1/%C3",                 // cut short at the end
                        "/v1/%C3/x",               // cut short before a '/'
                        "/v1/%C3a",                // continuation not escaped
                        "/v1/%80",                 // a continuation byte alone
                        "/v1/%ED%A0%80",           // a UTF-16 surrogate
                        "/v1/%F4%90%80%80",        // past U+10FFFF
                        "/v1/%C2%85",              // U+0085, a C1 control (NEL)
                        "/v1/%0a",
                        "/v1/%00",
                        "/v1/%7f",
                        "/admin./x",
                        "/admin%2E/x",
                        "/admin%20/x",
                        "/v1/admin.",
                        "/v1/x%20",
                        "/v1/admin.;x/users",  // a trailing dot before the parameters
                        "/.../x",
                        "/v1/..../x",
                        "/v1/%2E%2E%2E/x"}) {
    auto r = canonicalRequest("GET", t);
    ASSERT_FALSE(r) << t << " -> " << r->target();
    EXPECT_EQ(r.error().reason, Reason::kAmbiguousTarget) << t << ": " << r.error().detail;
  }
  EXPECT_NE(canonicalRequest("GET", "/v1/%C0%AE").error().detail.find("overlong"),
            std::string::npos);
  EXPECT_NE(canonicalRequest("GET", "/admin./x").error().detail.find("ending in '.'"),
            std::string::npos);
}

TEST(CanonicalRequest, KeepsValidUtf8AndOrdinaryDots) {
  EXPECT_EQ(canon("/caf%c3%a9/%E2%82%AC/%F0%9F%98%80"), "/caf%C3%A9/%E2%82%AC/%F0%9F%98%80");
  EXPECT_EQ(canon("/v1/a.b/.well-known/file.tar.gz"), "/v1/a.b/.well-known/file.tar.gz");
  EXPECT_EQ(canon("/v1/a%20b"), "/v1/a%20b");
  EXPECT_EQ(canon("/v1/x/../y/./"), "/v1/y/");
}

TEST(CanonicalRequest, PathParametersAreKeptAndCutOffInTheBarePath) {
  auto bare = [](std::string_view t) {
    auto r = canonicalRequest("GET", t);
    return r ? r->path + " | " + r->bare_path : "ERROR:" + r.error().detail;
  };
  EXPECT_EQ(bare("/v1/admin;x/users"), "/v1/admin;x/users | /v1/admin/users");
  EXPECT_EQ(bare("/v1/admin;/users"), "/v1/admin;/users | /v1/admin/users");
  EXPECT_EQ(bare("/v1/;x/admin"), "/v1/;x/admin | /v1/admin");
  EXPECT_EQ(bare("/v1/data;jsessionid=A1?q=1"), "/v1/data;jsessionid=A1 | /v1/data");
  EXPECT_EQ(bare("/v1/;x"), "/v1/;x | /v1/");
  EXPECT_EQ(bare("/v1/a%3Bb/c"), "/v1/a%3Bb/c | ");             // an encoded ';' is not a parameter
  EXPECT_EQ(bare("/v1/ok.txt;/../../admin/x"), "/admin/x | ");  // removed with its segment
  EXPECT_TRUE(canonicalRequest("GET", "/v1/admin;x/users")->hasPathParams());
  EXPECT_FALSE(canonicalRequest("GET", "/v1/admin/users")->hasPathParams());
}

TEST(CanonicalRequest, RefusesMalformedTargets) {
  for (std::string_view t :
       {std::string_view("v1/x"), std::string_view("*"), std::string_view("/a#frag"),
        std::string_view("/a b"), std::string_view("/%zz"), std::string_view("/%4"),
        std::string_view("/caf\xc3\xa9"), std::string_view("/a?x=%g1")}) {
    auto r = canonicalRequest("GET", t);
    ASSERT_FALSE(r) << t;
    EXPECT_EQ(r.error().reason, Reason::kInvalidTarget) << t;
  }
  auto ctl = canonicalRequest("GET", std::string_view("/a\x01", 3));
  ASSERT_FALSE(ctl);
  EXPECT_EQ(ctl.error().reason, Reason::kAmbiguousTarget);
}

TEST(CanonicalRequest, MethodsAreUpperCaseTokens) {
  for (const char* m : {"GET", "DELETE", "M-SEARCH", "PROPFIND"})
    EXPECT_TRUE(canonicalRequest(m, "/")) << m;
  for (const char* m : {"delete", "Delete", "put", "", "GE T", "GET\t", "G(ET"}) {
    auto r = canonicalRequest(m, "/");
    ASSERT_FALSE(r) << m;
    EXPECT_EQ(r.error().reason, Reason::kInvalidMethod) << m;
  }
}

TEST(CanonicalRequest, IsAFixedPoint) {
  for (const char* t : {"/v1/../a/./b//c/", "/%61/%7e/%c3%a9?x=1", "/a/b/..", "/x;y/z"}) {
    auto once = canonicalRequest("GET", t);
    ASSERT_TRUE(once) << t;
    auto twice = canonicalRequest("GET", once->target());
    ASSERT_TRUE(twice);
    EXPECT_EQ(twice->target(), once->target());
  }
}

// explain judges what the proxy judges: the canonical form, or the same refusal.
TEST(CanonicalRequest, ExplainDecidesTheCanonicalForm) {
  auto w = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: t\negress:\n  rules:\n"
      "    - {id: api, action: allow, hosts: [api.example], ports: [80], paths: [\"/v1/*\"]}\n"
      "    - {id: no-admin, action: deny, hosts: [api.example], ports: [80],\n"
      "       paths: [\"/v1/admin/*\"]}\n"
      "    - {id: no-delete, action: deny, hosts: [api.example], ports: [80],\n"
      "       methods: [DELETE]}\n",
      "t.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto m = Matcher::compile(std::make_shared<const Workflow>(std::move(*w)));
  auto decide = [&](std::string url, std::string method = "GET") {
    auto ex = explain(*m, {"http://api.example" + url, "", method, "93.184.216.34"});
    EXPECT_TRUE(ex) << url;
    return ex ? std::string(reasonName(ex->decision.reason)) + ":" + ex->path : "error";
  };
  EXPECT_EQ(decide("/v1/ok"), "allowed:/v1/ok");
  EXPECT_EQ(decide("/v1/../admin/x"), "path_not_allowed:/admin/x");
  EXPECT_EQ(decide("/v1/%61dmin/x"), "denied_by_rule:/v1/admin/x");
  EXPECT_EQ(decide("/v1//admin/x"), "denied_by_rule:/v1/admin/x");
  EXPECT_EQ(decide("/v1/%2e%2e/admin/x"), "ambiguous_target:");
  EXPECT_EQ(decide("/v1/ok", "DELETE"), "denied_by_rule:/v1/ok");
  EXPECT_EQ(decide("/v1/ok", "delete"), "invalid_method:");
}

std::shared_ptr<const Matcher> compileRules(const std::string& rules) {
  auto w = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: t\negress:\n  rules:\n" + rules, "t.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  return w ? Matcher::compile(std::make_shared<const Workflow>(std::move(*w))) : nullptr;
}

// "reason rule" for GET (or `method`) http://api.example<url>, as explain (and the proxy) decide.
std::string verdict(const Matcher& m, const std::string& url, const std::string& method = "GET") {
  auto ex = explain(m, {"http://api.example" + url, "", method, "93.184.216.34"});
  if (!ex) return "error: " + ex.error();
  return std::string(reasonName(ex->decision.reason)) + " " +
         (ex->decision.rule_id.empty() ? "-" : ex->decision.rule_id);
}

constexpr const char* kHost = "hosts: [api.example], ports: [80]";

// Rule `api` allowing /v1/* (with `api_options` added to it), then rule `no-admin` denying
// /v1/admin/*, case-sensitively.
std::shared_ptr<const Matcher> apiWithAdminDenied(const std::string& api_options) {
  return compileRules(std::string("    - {id: api, action: allow, ") + kHost +
                      ", paths: [\"/v1/*\"]" + api_options +
                      "}\n"
                      "    - {id: no-admin, action: deny, " +
                      kHost + ", paths: [\"/v1/admin/*\"], paths_case: sensitive}\n");
}

// `;` parameters: refused unless the rule allows them; a deny rule matches both spellings.
TEST(PathParams, RefusedUnlessTheRuleAllowsThemAndDenyRulesSeeBothSpellings) {
  auto strict = apiWithAdminDenied("");
  ASSERT_TRUE(strict);
  EXPECT_EQ(verdict(*strict, "/v1/admin;x/users"), "denied_by_rule no-admin");
  EXPECT_EQ(verdict(*strict, "/v1/admin;/users"), "denied_by_rule no-admin");
  EXPECT_EQ(verdict(*strict, "/v1/data;jsessionid=1/x"), "ambiguous_target api");
  EXPECT_EQ(verdict(*strict, "/v1/data/x"), "allowed api");
  EXPECT_EQ(verdict(*strict, "/v2;x/y"), "path_not_allowed api");

  auto lax = apiWithAdminDenied(", path_params: allow");
  ASSERT_TRUE(lax);
  EXPECT_EQ(verdict(*lax, "/v1/data;jsessionid=1/x"), "allowed api");
  EXPECT_EQ(verdict(*lax, "/v1/admin;x/users"), "denied_by_rule no-admin");
  // Matched with the parameters cut off: /v1;x/y is /v1/y to a servlet container.
  EXPECT_EQ(verdict(*lax, "/v1;x/y"), "allowed api");
  EXPECT_EQ(verdict(*lax, "/v2/x;.json"), "path_not_allowed api");
}

// An ask rule is never skipped by parameters: with an allowing rule next to it, a ';' path it
// would match is refused, not allowed past the approver.
TEST(PathParams, AnAskRuleIsNotSkipped) {
  auto m = compileRules(std::string("    - {id: all, action: allow, ") + kHost +
                        ", path_params: allow}\n"
                        "    - {id: ask-v1, action: ask, " +
                        kHost + ", paths: [\"/v1/*\"]}\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(verdict(*m, "/v1;x/y"), "ambiguous_target ask-v1");
  EXPECT_EQ(verdict(*m, "/v1/y"), "approval_required ask-v1");
  EXPECT_EQ(verdict(*m, "/v2;x/y"), "allowed all");
}

TEST(PathsCase, InsensitiveRulesMatchEverySpelling) {
  auto m = compileRules(std::string("    - {id: api, action: allow, ") + kHost + "}\n" +
                        "    - {id: no-admin, action: deny, " + kHost +
                        ", paths: [\"/v1/admin/*\", \"re:/v1/Secret.*\"], "
                        "paths_case: insensitive}\n"
                        "    - {id: no-debug, action: deny, " +
                        kHost + ", paths: [\"/debug/*\"], paths_case: sensitive}\n");
  ASSERT_TRUE(m);
  for (const char* p : {"/v1/admin/x", "/V1/ADMIN/x", "/v1/Admin/X", "/v1/%41dmin/x", "/v1/secret",
                        "/V1/SECRET/k", "/V1/ADMIN;x/y"})
    EXPECT_EQ(verdict(*m, p), "denied_by_rule no-admin") << p;
  EXPECT_EQ(verdict(*m, "/debug/x"), "denied_by_rule no-debug");
  EXPECT_EQ(verdict(*m, "/DEBUG/x"), "allowed api");
}

}  // namespace
}  // namespace sluice::policy
