// Approvals under TLS inspection: an `ask` rule with `tls: inspect` lets the CONNECT
// through and holds each request inside the tunnel. The approver is shown the request's method
// and path (not the CONNECT's); allow -> the request reaches the loopback HTTPS upstream, deny ->
// 403 approval_denied and the upstream saw nothing; two requests on one kept-alive inspected
// connection are asked separately, and a `scope: execution` answer covers the next one.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/approvals.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "tls_client.hpp"

namespace sluice::tls_testing {
namespace {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

constexpr const char* kPolicy = R"(apiVersion: sluice/v1
kind: Workflow
name: tls-ask
egress:
  rules:
    - id: gate
      action: ask
      hosts: [ask.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      ask: {timeout: 20s}
)";

class AskInspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-tls-ask-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ca_file_ = dir_ / "upstream-ca.pem";
    std::ofstream(ca_file_) << pki_.caPem();
    up_ = std::make_unique<HttpsUpstream>(pki_.leaf({"ask.test"}));
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice ask inspection test CA");
    ASSERT_TRUE(ca) << ca.error();
    ca_ = *ca;
    auto w = policy::parseWorkflow(kPolicy, "tls-ask.yaml");
    ASSERT_TRUE(w) << w.error().str();
    auto workflow = std::make_shared<const policy::Workflow>(std::move(*w));
    sink_ = std::make_shared<FakeSink>();
    desk_ = std::make_shared<proxy::ApprovalDesk>(sink_);
    watch_ = desk_->watch("", [this](const proxy::Approval& a) {
      std::lock_guard lock(mu_);
      raised_.push_back(a);
      cv_.notify_all();
    });
    auto resolver = std::make_shared<proxy::StaticResolver>();
    resolver->add("ask.test", {*policy::parseIpLiteral("127.0.0.1")});
    auto p = proxy::Proxy::create(tls_testing::inspectingOptions(ca_, ca_file_.string()), sink_,
                                  resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = "exec-tls-ask";
    id.matcher = policy::Matcher::compile(workflow);
    id.secrets = policy::makeSecretStore({});
    id.approvals = desk_;
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
  }
  void TearDown() override {
    if (proxy_) proxy_->stop();
    if (desk_) desk_->unwatch(watch_);
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string authority() const { return "ask.test:" + std::to_string(up_->port()); }

  // CONNECT (allowed at once: the ask is per request) and the TLS handshake with the proxy.
  std::unique_ptr<ProxyClient> tunnel() {
    auto c = std::make_unique<ProxyClient>(port_, nullptr, std::chrono::seconds(10));
    EXPECT_TRUE(c->ok());
    auto r = c->connect(authority());
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return nullptr;
    std::string why;
    bool ok = c->handshake(ca_->certificate(), "ask.test", "ask.test", &why);
    EXPECT_TRUE(ok) << why;
    if (!ok) return nullptr;
    return c;
  }

  std::optional<proxy::Approval> nextRaised() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return !raised_.empty(); }))
      return std::nullopt;
    auto a = raised_.front();
    raised_.pop_front();
    return a;
  }
  std::size_t raisedCount() {
    std::lock_guard lock(mu_);
    return raised_.size();
  }

  TestPki pki_;
  fs::path dir_, ca_file_;
  std::unique_ptr<HttpsUpstream> up_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::shared_ptr<FakeSink> sink_;
  std::shared_ptr<proxy::ApprovalDesk> desk_;
  std::uint64_t watch_ = 0;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<proxy::Approval> raised_;
};

TEST_F(AskInspectTest, TheApproverSeesTheRequestInsideTheTunnelAndAllowsIt) {
  auto c = tunnel();
  ASSERT_TRUE(c);
  EXPECT_EQ(raisedCount(), 0u) << "the CONNECT of an inspected ask rule is not asked";
  ASSERT_TRUE(c->send(request("POST", "/v1/items?x=1", authority(), "", "{\"a\":1}")));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "ask.test");
  EXPECT_EQ(a->port, up_->port());
  EXPECT_EQ(a->rule, "gate");
  ASSERT_TRUE(a->method);
  EXPECT_EQ(*a->method, "POST");
  ASSERT_TRUE(a->path);
  // The path as the audit rows have it: without the query string (which may carry tokens).
  EXPECT_EQ(*a->path, "/v1/items");
  EXPECT_EQ(a->execution_id, "exec-tls-ask");
  EXPECT_TRUE(up_->requests().empty()) << "held until answered";
  EXPECT_EQ(desk_->answer(a->id, true, proxy::Scope::kOnce, "tester"),
            proxy::AnswerStatus::kAnswered);
  auto r = c->readResponse();
  EXPECT_EQ(r.status, 200) << r.body;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].method, "POST");
  EXPECT_EQ(got[0].target, "/v1/items?x=1");
  EXPECT_EQ(got[0].body, "{\"a\":1}");
  auto ev = sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/v1/items"; });
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kAllow);
  EXPECT_EQ(ev->rule_id, "gate");
}

TEST_F(AskInspectTest, ADeniedRequestGets403AndTheUpstreamNothing) {
  auto c = tunnel();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(request("GET", "/secret", authority())));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  EXPECT_EQ(*a->method, "GET");
  EXPECT_EQ(*a->path, "/secret");
  desk_->answer(a->id, false, proxy::Scope::kOnce, "tester");
  auto r = c->readResponse();
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
  EXPECT_TRUE(up_->requests().empty());
  auto ev = sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/secret"; });
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->decision, audit::Decision::kDeny);
  EXPECT_EQ(ev->reason, "approval_denied");
}

TEST_F(AskInspectTest, TwoRequestsOnOneKeptAliveConnectionAreAskedSeparately) {
  auto c = tunnel();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(request("GET", "/v1/one", authority())));
  auto first = nextRaised();
  ASSERT_TRUE(first);
  EXPECT_EQ(*first->path, "/v1/one");
  desk_->answer(first->id, true, proxy::Scope::kOnce, "tester");
  EXPECT_EQ(c->readResponse().status, 200);
  // The same connection, the next request: asked again (the first answer was for one request).
  ASSERT_TRUE(c->send(request("GET", "/v1/two", authority())));
  auto second = nextRaised();
  ASSERT_TRUE(second);
  EXPECT_NE(second->id, first->id);
  EXPECT_EQ(*second->path, "/v1/two");
  desk_->answer(second->id, false, proxy::Scope::kOnce, "tester");
  auto r = c->readResponse();
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "approval_denied");
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, "/v1/one");
}

TEST_F(AskInspectTest, AnExecutionScopedAnswerCoversTheNextRequestsOfItsMethod) {
  auto c = tunnel();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(request("GET", "/v1/a", authority())));
  auto a = nextRaised();
  ASSERT_TRUE(a);
  desk_->answer(a->id, true, proxy::Scope::kExecution, "tester");
  EXPECT_EQ(c->readResponse().status, 200);
  ASSERT_TRUE(c->send(request("GET", "/v1/b", authority())));
  EXPECT_EQ(c->readResponse().status, 200);
  // A second tunnel of the same execution: covered too (same rule, host, port and method).
  auto c2 = tunnel();
  ASSERT_TRUE(c2);
  ASSERT_TRUE(c2->send(request("GET", "/v1/c", authority())));
  EXPECT_EQ(c2->readResponse().status, 200);
  EXPECT_EQ(raisedCount(), 0u) << "covered requests raise no approval for approvers";
  EXPECT_EQ(up_->requests().size(), 3u);
  // Another method is asked again (the approver was shown a GET): refused here.
  ASSERT_TRUE(c2->send(request("DELETE", "/v1/c", authority())));
  auto d = nextRaised();
  ASSERT_TRUE(d) << "a DELETE went through on a GET's execution grant";
  EXPECT_EQ(d->method, "DELETE");
  desk_->answer(d->id, false, proxy::Scope::kOnce, "tester");
  EXPECT_EQ(c2->readResponse().status, 403);
  EXPECT_EQ(up_->requests().size(), 3u);
}

// HTTP/2: two streams of one connection ask at the same time, each shown its own path; one is
// allowed and reaches the upstream, the other is refused on its own stream.
TEST_F(AskInspectTest, Http2StreamsAreAskedEachOnTheirOwn) {
  std::ofstream(dir_ / "proxy-ca.pem") << ca_->certificatePem();
  const std::string base = "https://" + authority();
  const std::string cmd =
      "curl --http2 -sS --no-progress-meter --max-time 30 --parallel"
      " --proxy http://127.0.0.1:" +
      std::to_string(port_) + " --cacert " + (dir_ / "proxy-ca.pem").string() +
      " -w '%{url_effective} %{http_code} %{http_version}\\n'"
      " -o /dev/null " +
      base + "/v1/a -o /dev/null " + base + "/v1/b 2>&1";
  std::string out;
  std::thread client([&] {
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, f)) out += buf;
      ::pclose(f);
    }
  });
  auto first = nextRaised();
  auto second = nextRaised();
  ASSERT_TRUE(first && second) << "both streams wait for an answer at once";
  std::set<std::string> paths{first->path.value_or(""), second->path.value_or("")};
  EXPECT_EQ(paths, (std::set<std::string>{"/v1/a", "/v1/b"}));
  for (const auto& a : {*first, *second})
    desk_->answer(a.id, a.path == "/v1/a", proxy::Scope::kOnce, "tester");
  client.join();
  EXPECT_NE(out.find(base + "/v1/a 200 2"), std::string::npos) << out;
  EXPECT_NE(out.find(base + "/v1/b 403 2"), std::string::npos) << out;
  auto got = up_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, "/v1/a");
  auto denied = sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/v1/b"; });
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->reason, "approval_denied");
}

// An HTTP/2 client that goes away while its stream waits withdraws the stream's approval (the
// stream's exchange sees the hang-up on its socket pair): no approver is left to allow a
// request nobody waits for.
TEST_F(AskInspectTest, Http2ClientThatGoesAwayWithdrawsItsApproval) {
  std::ofstream(dir_ / "proxy-ca.pem") << ca_->certificatePem();
  const std::string cmd = "curl --http2 -s --max-time 1 -o /dev/null --proxy http://127.0.0.1:" +
                          std::to_string(port_) + " --cacert " + (dir_ / "proxy-ca.pem").string() +
                          " https://" + authority() + "/v1/held";
  std::thread client([&] { (void)std::system(cmd.c_str()); });
  auto a = nextRaised();
  client.join();  // curl gave up after a second; the approval's timeout is 20 s
  ASSERT_TRUE(a);
  for (int i = 0; i < 500 && !desk_->pending().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(desk_->pending().empty()) << "an approval nobody waits for is still pending";
  EXPECT_EQ(desk_->answer(a->id, true, proxy::Scope::kOnce, "late"), proxy::AnswerStatus::kGone);
  EXPECT_TRUE(up_->requests().empty());
}

// A draining proxy tells an HTTP/2 client with GOAWAY (no error, its open stream the last one
// processed) before the connection ends.
TEST_F(AskInspectTest, Http2ClientIsToldGoawayWhenTheProxyDrains) {
  std::ofstream(dir_ / "proxy-ca.pem") << ca_->certificatePem();
  const std::string cmd = std::string("node ") + SLUICE_SOURCE_DIR +
                          "/tests/proxy/clients/h2_goaway.mjs " + std::to_string(port_) + " " +
                          authority() + " " + (dir_ / "proxy-ca.pem").string() + " /v1/held 2>&1";
  std::string out;
  std::thread client([&] {
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, f)) out += buf;
      ::pclose(f);
    }
  });
  auto a = nextRaised();  // the stream is open, waiting for its approval
  proxy_->stop();
  client.join();
  ASSERT_TRUE(a) << out;
  auto r = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  EXPECT_EQ(r["alpn"], "h2");
  ASSERT_TRUE(r["goaway"].is_object()) << out;
  EXPECT_EQ(r["goaway"]["code"], 0) << "NO_ERROR";
  EXPECT_EQ(r["goaway"]["last"], 1) << "the open stream was taken";
  EXPECT_TRUE(up_->requests().empty());
}

}  // namespace
}  // namespace sluice::tls_testing
