// The inspecting proxy of the WebSocket tests (websocket_test.cpp with Python's `websockets`,
// websocket_node_test.cpp with npm's `ws`): a listener whose rule `ws` injects a bearer token on
// the upgrade and swaps its placeholder (WS_TOKEN) in client text frames, and a rule `other`
// with a placeholder of its own; a test CA for the upstream (upstream.pem / upstream.key for
// ws.test and other.test, both resolved to 127.0.0.1) and the proxy's CA in proxy-ca.pem.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::tls_testing {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

constexpr const char* kSecret = "ws-secret-5e1c7a9b3d2f4e6a";

constexpr const char* kPolicy = R"(apiVersion: sluice/v1
kind: Workflow
name: tls-ws
egress:
  rules:
    - id: ws
      action: allow
      hosts: [ws.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        headers: {Authorization: "Bearer ${secret:ws_key}"}
        placeholder_env: WS_TOKEN
    - id: other
      action: allow
      hosts: [other.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      inject:
        headers: {Authorization: "Bearer ${secret:other_key}"}
        placeholder_env: OTHER_TOKEN
)";

class WebSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-tls-ws-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "upstream-ca.pem") << pki_.caPem();
    auto leaf = pki_.leaf({"ws.test", "other.test"});
    std::ofstream(dir_ / "upstream.pem") << leaf.cert_pem;
    std::ofstream(dir_ / "upstream.key") << leaf.key_pem;
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice websocket test CA");
    ASSERT_TRUE(ca) << ca.error();
    ca_ = *ca;
    std::ofstream(dir_ / "proxy-ca.pem") << ca_->certificatePem();
    auto w = policy::parseWorkflow(kPolicy, "tls-ws.yaml");
    ASSERT_TRUE(w) << w.error().str();
    auto workflow = std::make_shared<const policy::Workflow>(std::move(*w));
    placeholders_ = proxy::makePlaceholders(*workflow);
    ASSERT_EQ(placeholders_.size(), 2u);
    sink_ = std::make_shared<FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    for (const char* h : {"ws.test", "other.test"})
      resolver->add(h, {*policy::parseIpLiteral("127.0.0.1")});
    auto p = proxy::Proxy::create(inspectingOptions(ca_, (dir_ / "upstream-ca.pem").string()),
                                  sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = "exec-tls-ws";
    id.matcher = policy::Matcher::compile(workflow);
    id.secrets = policy::makeSecretStore({{"ws_key", kSecret}, {"other_key", "other-value"}});
    id.placeholders = placeholders_;
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
  }

  void TearDown() override {
    if (proxy_) proxy_->stop();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  const proxy::Placeholder& placeholder(const std::string& env) const {
    for (const auto& p : placeholders_)
      if (p.env == env) return p;
    throw std::logic_error("no placeholder " + env);
  }

  TestPki pki_;
  fs::path dir_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::vector<proxy::Placeholder> placeholders_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
};

}  // namespace sluice::tls_testing
