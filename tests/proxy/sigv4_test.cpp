// SigV4 at the proxy, the pure parts: the AWS test-suite and documentation vectors, every
// signature cross-checked with botocore's own signer (tests/proxy/sigv4_botocore.py), refusals
// (another key, another secret, a changed header), signing again (headers, session token,
// presigned URLs), aws-chunked streaming uploads split at every byte, and the placeholders.
#include "sigv4.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "injection.hpp"
#include "sigv4_chunks.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy::sigv4 {
namespace {

using nlohmann::json;

// The documented example credentials (AWS SigV4 test suite, S3 documentation).
constexpr Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
constexpr Credentials kS3Doc{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                             ""};
constexpr Credentials kPlaceholder{"AKIAPLACEHOLDER00001",
                                   "placeholder/secret+key0000000000000000000", ""};
constexpr Credentials kReal{"AKIAREALREALREAL0002", "real/secret+key00000000000000000000000000",
                            "real-session-token"};

// Signatures botocore computes for `reqs` (one python3 process for all of them).
std::vector<std::string> botocore(const std::vector<json>& reqs) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto in = dir / ("sigv4-in-" + std::to_string(::getpid()));
  {
    std::ofstream f(in);
    for (const auto& r : reqs) f << r.dump() << "\n";
  }
  const std::string cmd =
      "python3 " SLUICE_SOURCE_DIR "/tests/proxy/sigv4_botocore.py < " + in.string();
  std::vector<std::string> out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, p)) {
      std::string s(line);
      while (!s.empty() && s.back() == '\n') s.pop_back();
      out.push_back(s);
    }
    ::pclose(p);
  }
  std::filesystem::remove(in);
  return out;
}

// What botocore needs to sign `req` (host from the Host field) over `signed_headers`.
json botoRequest(const Request& req, const Auth& a, std::string_view secret) {
  std::string host;
  json headers = json::array();
  for (const auto& [n, v] : req.headers) {
    if (n == "Host" || n == "host") host = v;
    headers.push_back({n, v});
  }
  return {{"method", req.method},
          {"url", "https://" + host + req.target},
          {"headers", headers},
          {"signed", a.signed_headers},
          {"service", a.service},
          {"region", a.region},
          {"secret", std::string(secret)},
          {"timestamp", a.amz_date},
          {"payload", a.payload_hash},
          {"presigned", a.presigned}};
}

std::string authorization(const Credentials& c, std::string_view scope, std::string_view signed_h,
                          std::string_view sig) {
  return "AWS4-HMAC-SHA256 Credential=" + std::string(c.access_key_id) + "/" + std::string(scope) +
         ", SignedHeaders=" + std::string(signed_h) + ", Signature=" + std::string(sig);
}

Request getVanilla() {
  return {"GET",
          "/",
          {{"Host", "example.amazonaws.com"},
           {"X-Amz-Date", "20150830T123600Z"},
           {"Authorization",
            authorization(kSuite, "20150830/us-east-1/service/aws4_request", "host;x-amz-date",
                          "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")}}};
}

Request s3GetObject() {
  return {"GET",
          "/test.txt",
          {{"Host", "examplebucket.s3.amazonaws.com"},
           {"Range", "bytes=0-9"},
           {"x-amz-content-sha256", std::string(kEmptyHash)},
           {"x-amz-date", "20130524T000000Z"},
           {"Authorization",
            authorization(kS3Doc, "20130524/us-east-1/s3/aws4_request",
                          "host;range;x-amz-content-sha256;x-amz-date",
                          "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")}}};
}

TEST(SigV4, TheDocumentedVectorsVerify) {
  auto vanilla = verify(getVanilla(), kSuite, kEmptyHash);
  ASSERT_TRUE(vanilla) << vanilla.error().detail;
  EXPECT_EQ(vanilla->service, "service");
  auto s3 = verify(s3GetObject(), kS3Doc);
  ASSERT_TRUE(s3) << s3.error().detail;
  EXPECT_EQ(s3->region, "us-east-1");
  EXPECT_EQ(s3->signed_headers.size(), 4u);
  // botocore agrees on both.
  auto boto = botocore({botoRequest(getVanilla(), *vanilla, kSuite.secret_access_key),
                        botoRequest(s3GetObject(), *s3, kS3Doc.secret_access_key)});
  ASSERT_EQ(boto.size(), 2u);
  EXPECT_EQ(boto[0], vanilla->signature);
  EXPECT_EQ(boto[1], s3->signature);
}

TEST(SigV4, RefusesAnotherKeyAnotherSecretAndAChangedRequest) {
  auto other_id = verify(s3GetObject(), {"AKIAOTHER", kS3Doc.secret_access_key, ""});
  ASSERT_FALSE(other_id);
  EXPECT_EQ(other_id.error().problem, Problem::kWrongAccessKey);
  auto other_secret = verify(s3GetObject(), {kS3Doc.access_key_id, "not-the-secret", ""});
  ASSERT_FALSE(other_secret);
  EXPECT_EQ(other_secret.error().problem, Problem::kSignatureMismatch);
  EXPECT_EQ(other_secret.error().detail.find("not-the-secret"), std::string::npos);
  Request changed = s3GetObject();
  changed.headers[1].second = "bytes=0-99";  // a signed header
  EXPECT_EQ(verify(changed, kS3Doc).error().problem, Problem::kSignatureMismatch);
  changed = s3GetObject();
  changed.target = "/other.txt";
  EXPECT_EQ(verify(changed, kS3Doc).error().problem, Problem::kSignatureMismatch);
  changed = s3GetObject();
  changed.headers.back().second = "AWS4-HMAC-SHA256 Credential=x, Signature=zz";
  EXPECT_EQ(verify(changed, kS3Doc).error().problem, Problem::kMalformed);
  // A non-S3 body signed without x-amz-content-sha256: the proxy must be told the body hash.
  EXPECT_EQ(verify(getVanilla(), kSuite).error().problem, Problem::kBodyHashNeeded);
  EXPECT_FALSE(isSigned({"GET", "/", {{"Authorization", "Bearer x"}}}));
  EXPECT_TRUE(isSigned(getVanilla()));
}

// A request signed by botocore with `c` at `amz_date` over every header but Authorization.
Request signedByBotocore(Request req, const Credentials& c, std::string service,
                         std::string amz_date) {
  Auth a;
  a.service = std::move(service);
  a.region = "eu-west-3";
  a.amz_date = std::move(amz_date);
  a.date = a.amz_date.substr(0, 8);
  a.payload_hash = std::string(kEmptyHash);
  for (const auto& [n, v] : req.headers) {
    std::string l = n;
    for (auto& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (l == "x-amz-content-sha256") a.payload_hash = v;
    a.signed_headers.push_back(l);
  }
  std::sort(a.signed_headers.begin(), a.signed_headers.end());
  auto sig = botocore({botoRequest(req, a, c.secret_access_key)});
  std::string sh;
  for (const auto& h : a.signed_headers) sh += (sh.empty() ? "" : ";") + h;
  req.headers.emplace_back("Authorization",
                           authorization(c, a.scope(), sh, sig.empty() ? "" : sig[0]));
  return req;
}

// Signing again: what botocore computes with the real key over the re-signed request.
void expectResignedMatchesBotocore(const Request& sent, const Credentials& real) {
  auto v = verify(sent, kPlaceholder, kEmptyHash);
  ASSERT_TRUE(v) << sent.target << ": " << v.error().detail;
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1767225600));
  auto r = resign(sent, *v, real, now);
  ASSERT_TRUE(r) << r.error().detail;
  Request out = sent;
  out.target = r->target;
  for (const auto& [n, value] : r->set) {
    std::erase_if(out.headers,
                  [&](const auto& h) { return strcasecmp(h.first.c_str(), n.c_str()) == 0; });
    out.headers.emplace_back(n, value);
  }
  EXPECT_EQ(r->auth.amz_date, "20260101T000000Z");
  EXPECT_EQ(r->auth.region, v->region);
  EXPECT_EQ(r->auth.access_key_id, real.access_key_id);
  auto boto = botocore({botoRequest(out, r->auth, real.secret_access_key)});
  ASSERT_EQ(boto.size(), 1u);
  EXPECT_EQ(boto[0], r->auth.signature) << sent.target;
  // And it verifies as the real key's signature.
  auto again = verify(out, real, kEmptyHash);
  EXPECT_TRUE(again) << (again ? "" : again.error().detail);
}

TEST(SigV4, SignsAgainAsBotocoreDoes) {
  const std::string date = "20251231T235959Z";
  Request s3{"PUT",
             "/bucket/dir/a%20b%2Bc~d%21.txt?x-id=PutObject&acl=private",
             {{"Host", "127.0.0.1:9000"},
              {"x-amz-content-sha256", std::string(kUnsignedPayload)},
              {"Content-Type", "text/plain"},
              {"x-amz-date", date}}};
  expectResignedMatchesBotocore(signedByBotocore(s3, kPlaceholder, "s3", date), kReal);
  expectResignedMatchesBotocore(signedByBotocore(s3, kPlaceholder, "s3", date),
                                {kReal.access_key_id, kReal.secret_access_key, ""});
  Request list{"GET",
               "/bucket?list-type=2&prefix=a%2Fb&delimiter=%2F&encoding-type=url",
               {{"Host", "s3.local"},
                {"x-amz-content-sha256", std::string(kEmptyHash)},
                {"x-amz-date", date},
                {"X-Amz-Security-Token", "placeholder-token"}}};
  expectResignedMatchesBotocore(signedByBotocore(list, kPlaceholder, "s3", date), kReal);
  Request service{"GET",
                  "/a/./b//c/../d%20e?Version=2010-05-08&Action=ListUsers",
                  {{"Host", "iam.local"}, {"x-amz-date", date}, {"Foo", "  a   b  "}}};
  expectResignedMatchesBotocore(signedByBotocore(service, kPlaceholder, "iam", date), kReal);
}

TEST(SigV4, PresignedUrlsAreSignedAgain) {
  const std::string date = "20251231T235959Z";
  std::string cred = "AKIAPLACEHOLDER00001%2F20251231%2Feu-west-3%2Fs3%2Faws4_request";
  Request url{"GET",
              "/bucket/key.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + cred +
                  "&X-Amz-Date=" + date + "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host",
              {{"Host", "s3.local"}}};
  Auth a;
  a.presigned = true;
  a.service = "s3";
  a.region = "eu-west-3";
  a.amz_date = date;
  a.date = "20251231";
  a.signed_headers = {"host"};
  a.payload_hash = std::string(kUnsignedPayload);
  auto sig = botocore({botoRequest(url, a, kPlaceholder.secret_access_key)});
  ASSERT_EQ(sig.size(), 1u);
  url.target += "&X-Amz-Signature=" + sig[0];
  auto v = verify(url, kPlaceholder);
  ASSERT_TRUE(v) << v.error().detail;
  EXPECT_TRUE(v->presigned);
  auto r = resign(url, *v, kReal, std::chrono::system_clock::now());
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_NE(r->target.find("X-Amz-Credential=AKIAREALREALREAL0002%2F20251231%2F"),
            std::string::npos)
      << r->target;
  EXPECT_NE(r->target.find("X-Amz-Security-Token=real-session-token"), std::string::npos);
  EXPECT_NE(r->target.find("X-Amz-Date=" + date), std::string::npos);  // kept
  Request out = url;
  out.target = r->target;
  auto boto = botocore({botoRequest(out, r->auth, kReal.secret_access_key)});
  ASSERT_EQ(boto.size(), 1u);
  EXPECT_EQ(boto[0], r->auth.signature);
  EXPECT_TRUE(verify(out, kReal));
  url.target.back() = url.target.back() == '0' ? '1' : '0';
  EXPECT_EQ(verify(url, kPlaceholder).error().problem, Problem::kSignatureMismatch);
}

// The S3 documentation's chunked upload: 64 KiB + 1 KiB of 'a', signed with kS3Doc.
struct DocUpload {
  Request req;
  std::string body;
};

DocUpload s3DocUpload() {
  DocUpload u;
  u.req = {"PUT",
           "/examplebucket/chunkObject.txt",
           {{"Host", "s3.amazonaws.com"},
            {"x-amz-date", "20130524T000000Z"},
            {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
            {"x-amz-content-sha256", std::string(kStreamingPayload)},
            {"Content-Encoding", "aws-chunked"},
            {"x-amz-decoded-content-length", "66560"},
            {"Content-Length", "66824"},
            {"Authorization",
             authorization(kS3Doc, "20130524/us-east-1/s3/aws4_request",
                           "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                           "x-amz-decoded-content-length;x-amz-storage-class",
                           "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")}}};
  u.body =
      "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n" +
      std::string(65536, 'a') +
      "\r\n400;chunk-signature="
      "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n" +
      std::string(1024, 'a') +
      "\r\n0;chunk-signature="
      "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n";
  return u;
}

TEST(SigV4Chunks, TheDocumentedUploadVerifiesAndIsSignedAgain) {
  DocUpload u = s3DocUpload();
  EXPECT_EQ(u.body.size(), 66824u);
  auto v = verify(u.req, kS3Doc);
  ASSERT_TRUE(v) << v.error().detail;
  // Same key on both sides: the chain verifies and the bytes come out unchanged.
  ChunkResigner same(chainOf(*v, kS3Doc.secret_access_key), chainOf(*v, kS3Doc.secret_access_key));
  std::string out;
  ASSERT_TRUE(same.feed(u.body, out)) << same.error();
  EXPECT_TRUE(same.done());
  EXPECT_EQ(out, u.body);
  // Another key: same length, new signatures, and they chain under that key.
  auto r = resign(u.req, *v, kReal, std::chrono::system_clock::now());
  ASSERT_TRUE(r);
  ChunkResigner to_real(chainOf(*v, kS3Doc.secret_access_key),
                        chainOf(r->auth, kReal.secret_access_key));
  std::string real_body;
  for (std::size_t i = 0; i < u.body.size(); i += 1000)
    ASSERT_TRUE(to_real.feed(std::string_view(u.body).substr(i, 1000), real_body));
  EXPECT_TRUE(to_real.done());
  EXPECT_EQ(real_body.size(), u.body.size());
  EXPECT_NE(real_body, u.body);
  ChunkResigner check(chainOf(r->auth, kReal.secret_access_key),
                      chainOf(r->auth, kReal.secret_access_key));
  std::string echoed;
  EXPECT_TRUE(check.feed(real_body, echoed)) << check.error();
  EXPECT_TRUE(check.done());
}

// A small upload signed with `chain`: chunks of `sizes` bytes, then the last one.
std::string chunkedBody(ChunkChain chain, const std::vector<std::size_t>& sizes) {
  std::string body;
  char c = 'x';
  for (std::size_t n : sizes) {
    std::string data(n, c++);
    chain.previous = chunkSignature(chain, base::sha256Hex(data));
    char hex[16];
    std::snprintf(hex, sizeof hex, "%zx", n);
    body += std::string(hex) + ";chunk-signature=" + chain.previous + "\r\n" + data + "\r\n";
  }
  chain.previous = chunkSignature(chain, kEmptyHash);
  return body + "0;chunk-signature=" + chain.previous + "\r\n\r\n";
}

TEST(SigV4Chunks, EverySplitGivesTheSameBytes) {
  DocUpload u = s3DocUpload();
  auto v = verify(u.req, kS3Doc);
  ASSERT_TRUE(v);
  ChunkChain ph = chainOf(*v, kS3Doc.secret_access_key);
  ChunkChain real = chainOf(*v, kReal.secret_access_key);
  const std::string body = chunkedBody(ph, {20, 7, 1, 33});
  std::string whole;
  {
    ChunkResigner one(ph, real);
    ASSERT_TRUE(one.feed(body, whole)) << one.error();
    ASSERT_TRUE(one.done());
  }
  for (std::size_t i = 0; i <= body.size(); ++i) {
    for (std::size_t j = i; j <= body.size(); j += 7) {
      ChunkResigner t(ph, real);
      std::string out;
      ASSERT_TRUE(t.feed(std::string_view(body).substr(0, i), out));
      ASSERT_TRUE(t.feed(std::string_view(body).substr(i, j - i), out));
      ASSERT_TRUE(t.feed(std::string_view(body).substr(j), out));
      ASSERT_TRUE(t.done());
      ASSERT_EQ(out, whole) << i << "," << j;
    }
  }
  ChunkResigner bytewise(ph, real);
  std::string out;
  for (char c : body) ASSERT_TRUE(bytewise.feed(std::string_view(&c, 1), out));
  EXPECT_EQ(out, whole);
}

TEST(SigV4Chunks, AChunkThatDoesNotVerifyStopsTheUpload) {
  DocUpload u = s3DocUpload();
  auto v = verify(u.req, kS3Doc);
  ASSERT_TRUE(v);
  ChunkChain ph = chainOf(*v, kS3Doc.secret_access_key);
  ChunkChain real = chainOf(*v, kReal.secret_access_key);
  std::string body = chunkedBody(ph, {20, 7});
  // The second chunk's data changed: the first chunk goes out, nothing after it.
  std::string tampered = body;
  tampered[tampered.find("yyyy")] = 'z';
  ChunkResigner t(ph, real);
  std::string out;
  EXPECT_FALSE(t.feed(tampered, out));
  EXPECT_NE(t.error().find("chunk signature"), std::string::npos);
  EXPECT_EQ(out.find('y'), std::string::npos);
  EXPECT_NE(out.find(std::string(20, 'x')), std::string::npos);
  EXPECT_FALSE(t.feed("more", out));
  // Signed with another key from the start; bytes after the last chunk; broken framing.
  ChunkResigner other(chainOf(*v, "another-secret"), real);
  EXPECT_FALSE(other.feed(body, out));
  ChunkResigner trailing(ph, real);
  EXPECT_FALSE(trailing.feed(body + "x", out));
  ChunkResigner framing(ph, real);
  EXPECT_FALSE(framing.feed("14;chunk-signature=abc\r\n", out));
}

TEST(SigV4Placeholders, ShapedLikeAwsKeysAndNewEachTime) {
  auto w = policy::parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: s3\negress:\n  rules:\n"
      "    - id: s3\n      action: allow\n      hosts: [s3.example]\n      tls: inspect\n"
      "      inject:\n        aws_sigv4:\n          access_key_id: ${secret:id}\n"
      "          secret_access_key: ${secret:key}\n          session_token: ${secret:st}\n",
      "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto a = makePlaceholders(*w);
  auto b = makePlaceholders(*w);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].env, "AWS_ACCESS_KEY_ID");
  EXPECT_EQ(a[0].secret, "id");
  EXPECT_EQ(a[0].token.size(), 20u);
  EXPECT_TRUE(a[0].token.starts_with("AKIA"));
  for (char c : a[0].token) EXPECT_TRUE(std::isupper(c) || std::isdigit(c)) << a[0].token;
  EXPECT_EQ(a[1].env, "AWS_SECRET_ACCESS_KEY");
  EXPECT_EQ(a[1].token.size(), 40u);
  EXPECT_EQ(a[2].env, "AWS_SESSION_TOKEN");
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(a[i].swapped);
    EXPECT_EQ(a[i].rule_id, "s3");
    EXPECT_NE(a[i].token, b[i].token);
  }
}

// The stand-ins are bound to their rule like any placeholder: on its requests they are left for
// the signature check (never swapped for a secret), on another rule's they are a leak.
TEST(SigV4Placeholders, NeverSwappedAndALeakElsewhere) {
  auto w = policy::parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: s3\negress:\n  rules:\n"
      "    - id: s3\n      action: allow\n      hosts: [s3.example]\n      tls: inspect\n"
      "      inject:\n        aws_sigv4:\n          access_key_id: ${secret:id}\n"
      "          secret_access_key: ${secret:key}\n"
      "    - id: other\n      action: allow\n      hosts: [o.example]\n      tls: inspect\n"
      "      inject:\n        headers: {X-K: \"${secret:o}\"}\n",
      "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto phs = makePlaceholders(*w);
  ASSERT_EQ(phs.size(), 2u);
  auto secrets = policy::makeSecretStore({{"id", "AKIAREAL"}, {"key", "real-key"}, {"o", "o"}});
  auto fields = [&] {
    http::fields f;
    f.set(http::field::authorization, "AWS4-HMAC-SHA256 Credential=" + phs[0].token + "/x");
    f.set("X-Leak", phs[1].token);
    return f;
  };
  http::fields own = fields();
  auto inj = applyInjection(own, &w->rules[0], secrets.get(), phs);
  EXPECT_FALSE(inj.placeholder_leak);
  EXPECT_FALSE(inj.error);
  EXPECT_EQ(own["X-Leak"], phs[1].token);  // not swapped for the real secret
  EXPECT_NE(own[http::field::authorization].find(phs[0].token), std::string::npos);
  http::fields elsewhere = fields();
  inj = applyInjection(elsewhere, &w->rules[1], secrets.get(), phs);
  EXPECT_TRUE(inj.placeholder_leak);
  EXPECT_EQ(elsewhere["X-Leak"], phs[1].token);
}

}  // namespace
}  // namespace sluice::proxy::sigv4
