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
  EXPECT_EQ(canon("/%7euser/%2d%5f%2E"), "/~user/-_.");
  EXPECT_EQ(canon("/a%20b/%c3%a9"), "/a%20b/%C3%A9");  // reserved/other: kept, upper-case hex
  EXPECT_EQ(canon("/a?b=%2f&c=..%2F"), "/a?b=%2f&c=..%2F");  // the query is not rewritten
}

TEST(CanonicalRequest, RefusesAmbiguousSpellings) {
  for (const char* t : {"/v1/%2e%2e/admin/x", "/v1/.%2e/x", "/v1/%2E/x", "/v1/..%2fadmin/x",
                        "/v1/%2F", "/v1/a%5cb", "/v1/a\\b", "/v1/..;/admin", "/v1/.;x/y",
                        "/v1/%00", "/v1/%0a", "/v1/%7F"}) {
    auto r = canonicalRequest("GET", t);
    ASSERT_FALSE(r) << t << " -> " << r->target();
    EXPECT_EQ(r.error().reason, Reason::kAmbiguousTarget) << t << ": " << r.error().detail;
  }
}

TEST(CanonicalRequest, RefusesMalformedTargets) {
  for (std::string_view t : {std::string_view("v1/x"), std::string_view("*"),
                             std::string_view("/a#frag"), std::string_view("/a b"),
                             std::string_view("/%zz"), std::string_view("/%4"),
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

}  // namespace
}  // namespace sluice::policy
