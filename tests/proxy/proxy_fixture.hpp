// A running proxy on 127.0.0.1:0 with a fake sink, a static resolver and loopback upstreams.
// The SSRF guard blocks loopback, so the upstreams are reached as "upstream.test", which the
// resolver maps to 127.0.0.1 and a rule allows with allow_private + cidrs 127.0.0.0/8.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy::testing {

/// Compiles a workflow from YAML (fails the test on a load error).
inline std::shared_ptr<const policy::Matcher> compileWorkflow(const std::string& yaml) {
  auto w = policy::parseWorkflow(yaml, "test.yaml");
  EXPECT_TRUE(w) << (w ? "" : w.error().str());
  if (!w) return nullptr;
  return policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
}

/// The standard test workflow; `limits` is YAML for egress.limits (indented 4).
inline std::string standardPolicy(const std::string& name = "test",
                                  const std::string& limits = "") {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: " + name +
         "\negress:\n  rules:\n"
         "    - id: local-upstream\n"
         "      action: allow\n"
         "      hosts: [upstream.test, other.test]\n"
         "      ports: [\"1-65535\"]\n"
         "      allow_private: true\n"
         "      cidrs: [\"127.0.0.0/8\"]\n"
         "    - id: public-names\n"
         "      action: allow\n"
         "      hosts: [rebind.test, metadata.test, mixed.test, \"*.example.com\"]\n"
         "      ports: [\"1-65535\"]\n"
         "    - id: any-ip\n"
         "      action: allow\n"
         "      cidrs: [\"0.0.0.0/0\", \"::/0\"]\n"
         "      ports: [\"1-65535\"]\n"
         "    - id: inspected\n"
         "      action: allow\n"
         "      hosts: [inspect.test]\n"
         "      ports: [443]\n"
         "      tls: inspect\n"
         "    - id: no-delete\n"
         "      action: deny\n"
         "      hosts: [upstream.test]\n"
         "      methods: [DELETE]\n"
         "      ports: [\"1-65535\"]\n"
         "    - id: no-admin\n"
         "      action: deny\n"
         "      hosts: [upstream.test]\n"
         "      paths: [\"/admin/*\"]\n"
         "      ports: [\"1-65535\"]\n" +
         (limits.empty() ? "" : "  limits:\n" + limits);
}

class ProxyFixture : public ::testing::Test {
 protected:
  void SetUp() override { startProxy(); }
  void TearDown() override {
    if (proxy_) proxy_->stop();
  }

  virtual ProxyOptions options() {
    ProxyOptions o;
    o.threads = 2;
    o.header_timeout = std::chrono::milliseconds(1000);
    o.idle_timeout = std::chrono::milliseconds(30000);
    o.connect_timeout = std::chrono::milliseconds(2000);
    o.upstream_timeout = std::chrono::milliseconds(1500);
    o.drain_timeout = std::chrono::milliseconds(200);
    o.max_header_bytes = 8 * 1024;
    o.max_body_bytes = 1 << 20;
    return o;
  }
  virtual std::string policyYaml() { return standardPolicy(); }

  void startProxy() {
    sink_ = std::make_shared<FakeSink>();
    resolver_ = std::make_shared<StaticResolver>();
    auto lo = *policy::parseIpLiteral("127.0.0.1");
    resolver_->add("upstream.test", {lo});
    resolver_->add("other.test", {lo});
    resolver_->add("rebind.test", {lo});
    resolver_->add("metadata.test", {*policy::parseIpLiteral("169.254.169.254")});
    resolver_->add("mixed.test", {*policy::parseIpLiteral("93.184.216.34"), lo});
    resolver_->add("a.example.com", {lo});
    matcher_ = compileWorkflow(policyYaml());
    ASSERT_TRUE(matcher_);
    auto p = Proxy::create(options(), sink_, resolver_);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    ListenerIdentity identity{execution_id_, matcher_};
    if (wantApprovals()) {
      approvals_ = std::make_shared<ApprovalDesk>(sink_);
      approvals_->watch("", [this](const Approval& a) { approve(a); });
    }
    identity.approvals = approvals_;
    auto port = proxy_->listen("127.0.0.1", 0, identity);
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
  }

  std::string upstream() const { return "upstream.test:" + std::to_string(up_.httpPort()); }
  /// The echo server as a host no rule with methods/paths covers: its tunnels carry raw bytes.
  std::string echo() const { return "other.test:" + std::to_string(up_.echoPort()); }

  /// Sends `request` on a fresh connection and reads one response.
  Response roundTrip(const std::string& request) {
    Client c(port_);
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE(c.send(request));
    return c.readResponse();
  }

  Upstreams up_;
  std::shared_ptr<FakeSink> sink_;
  std::shared_ptr<StaticResolver> resolver_;
  std::shared_ptr<const policy::Matcher> matcher_;
  std::unique_ptr<Proxy> proxy_;
  std::uint16_t port_ = 0;
  std::string execution_id_ = "exec-1";
  /// A listener whose ask rules wait at approvals_ (made by startProxy), where approve() is told
  /// of each new approval (on the proxy thread that asked: answer, or leave it pending). Without:
  /// ask rules are refused with approval_unavailable.
  virtual bool wantApprovals() const { return false; }
  virtual void approve(const Approval& a) { (void)a; }
  std::shared_ptr<ApprovalDesk> approvals_;
};

}  // namespace sluice::proxy::testing
