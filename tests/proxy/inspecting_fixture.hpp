// An inspecting proxy for end-to-end tests whose upstream and clients run out of process
// (Python, Node): a temporary directory with the trusted test CA (upstream-ca.pem), a leaf for
// the test's hosts (upstream.pem / upstream.key, for the out-of-process server), and the proxy's
// ephemeral CA (proxy-ca.pem, for the clients); one listener on 127.0.0.1 port 0 whose hosts all
// resolve to 127.0.0.1, rows recorded by a FakeSink. Used by hmac_test.cpp and
// websocket_fixture.hpp.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::tls_testing {

class InspectingProxyTest : public ::testing::Test {
 protected:
  /// Writes the PKI files for `hosts`, then starts the proxy with one listener of execution
  /// `execution_id` under `policy` (its placeholders kept in placeholders_) and `secrets`.
  /// Call under ASSERT_NO_FATAL_FAILURE.
  void startProxy(const char* policy, const std::vector<std::string>& hosts,
                  const std::map<std::string, std::string>& secrets,
                  const std::string& execution_id) {
    char tmpl[] = "/tmp/sluice-inspecting-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "upstream-ca.pem") << pki_.caPem();
    auto leaf = pki_.leaf(hosts);
    std::ofstream(dir_ / "upstream.pem") << leaf.cert_pem;
    std::ofstream(dir_ / "upstream.key") << leaf.key_pem;
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice " + execution_id + " CA");
    ASSERT_TRUE(ca) << ca.error();
    ca_ = *ca;
    std::ofstream(dir_ / "proxy-ca.pem") << ca_->certificatePem();
    auto w = policy::parseWorkflow(policy, execution_id + ".yaml");
    ASSERT_TRUE(w) << w.error().str();
    auto workflow = std::make_shared<const policy::Workflow>(std::move(*w));
    placeholders_ = proxy::makePlaceholders(*workflow);
    sink_ = std::make_shared<proxy::testing::FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    for (const auto& h : hosts) resolver->add(h, {*policy::parseIpLiteral("127.0.0.1")});
    auto p = proxy::Proxy::create(inspectingOptions(ca_, (dir_ / "upstream-ca.pem").string()),
                                  sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = execution_id;
    id.matcher = policy::Matcher::compile(workflow);
    id.secrets = policy::makeSecretStore(secrets);
    id.placeholders = placeholders_;
    auto port = proxy_->listen("127.0.0.1", 0, std::move(id));
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    proxy_->start();
  }

  void TearDown() override {
    if (proxy_) proxy_->stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  const proxy::Placeholder& placeholder(const std::string& env) const {
    for (const auto& p : placeholders_)
      if (p.env == env) return p;
    throw std::logic_error("no placeholder " + env);
  }

  TestPki pki_;
  std::filesystem::path dir_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::vector<proxy::Placeholder> placeholders_;
  std::shared_ptr<proxy::testing::FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
};

}  // namespace sluice::tls_testing
