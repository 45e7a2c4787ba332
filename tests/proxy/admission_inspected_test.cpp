// The one admission (proxy/src/admission.hpp) for requests inside an inspected TLS tunnel: of
// two checks that both fail, the earlier one's refusal wins (status, reason, requests row), as
// for every other path (admission_test.cpp). The tunnel's upstream connection is already open
// and vetted, so the pairs are those of audit health, decide, ask and budget.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "tls_client.hpp"

namespace sluice::tls_testing {
namespace {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

enum class Check { kAudit, kDecide, kAsk, kBudget };

struct Case {
  Check first;   // fails, and its refusal wins
  Check second;  // fails too, later in the order
  const char* name;
};

// No approval desk here: an ask is refused at once as approval_unavailable.
std::string policyFor(const Case& c) {
  std::string yaml = R"(apiVersion: sluice/v1
kind: Workflow
name: inspected-order
egress:
  rules:
    - {id: api, action: allow, hosts: [api.test], ports: ["1-65535"], allow_private: true,
       cidrs: ["127.0.0.0/8"], tls: inspect}
    - {id: no-admin, action: deny, hosts: [api.test], ports: ["1-65535"], paths: ["/v1/admin/*"]}
    - {id: gate, action: ask, hosts: [api.test], ports: ["1-65535"], paths: ["/v1/ask/*"],
       allow_private: true, cidrs: ["127.0.0.0/8"], tls: inspect}
)";
  if (c.first == Check::kBudget || c.second == Check::kBudget)
    yaml += "  limits: {max_requests: 1}\n";
  return yaml;
}

class InspectedAdmissionTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-tls-order-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const fs::path ca_file = dir_ / "upstream-ca.pem";
    std::ofstream(ca_file) << pki_.caPem();
    up_ = std::make_unique<HttpsUpstream>(pki_.leaf({"api.test"}));
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice admission order test CA");
    ASSERT_TRUE(ca) << ca.error();
    ca_ = *ca;
    auto w = policy::parseWorkflow(policyFor(GetParam()), "order.yaml");
    ASSERT_TRUE(w) << w.error().str();
    sink_ = std::make_shared<FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    resolver->add("api.test", {*policy::parseIpLiteral("127.0.0.1")});
    auto p = proxy::Proxy::create(tls_testing::inspectingOptions(ca_, ca_file.string()), sink_,
                                  resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = "exec-order";
    id.matcher = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
    id.secrets = policy::makeSecretStore({});
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

  bool fails(Check c) const { return GetParam().first == c || GetParam().second == c; }
  std::string authority() const { return "api.test:" + std::to_string(up_->port()); }
  std::string subjectPath() const {
    if (fails(Check::kDecide)) return "/v1/admin/x";
    return fails(Check::kAsk) ? "/v1/ask/x" : "/v1/x";
  }

  TestPki pki_;
  fs::path dir_;
  std::unique_ptr<HttpsUpstream> up_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
};

TEST_P(InspectedAdmissionTest, TheEarlierCheckRefuses) {
  ProxyClient c(port_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c.connect(authority()).status, 200);
  std::string why;
  ASSERT_TRUE(c.handshake(ca_->certificate(), "api.test", "api.test", &why)) << why;
  // The first request on the tunnel goes through (and spends max_requests: 1).
  ASSERT_TRUE(c.send(request("GET", "/v1/first", authority())));
  ASSERT_EQ(c.readResponse().status, 200);
  if (fails(Check::kAudit)) sink_->setHealthy(false);
  ASSERT_TRUE(c.send(request("GET", subjectPath(), authority())));
  const auto r = c.readResponse();
  struct Want {
    int status;
    const char* reason;
  };
  const Want want = GetParam().first == Check::kAudit    ? Want{503, "audit_unavailable"}
                    : GetParam().first == Check::kDecide ? Want{403, "denied_by_rule"}
                    : GetParam().first == Check::kAsk    ? Want{403, "approval_unavailable"}
                                                         : Want{429, "limit_exceeded"};
  EXPECT_EQ(r.status, want.status) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), want.reason) << r.body;
  const std::string path = subjectPath();
  auto row = sink_->waitRequest([&](const audit::RequestEvent& e) { return e.path == path; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
  EXPECT_EQ(row->reason, want.reason);
  sink_->setHealthy(true);
}

INSTANTIATE_TEST_SUITE_P(Inspected, InspectedAdmissionTest,
                         ::testing::Values(Case{Check::kAudit, Check::kDecide, "AuditBeforeDecide"},
                                           Case{Check::kAudit, Check::kAsk, "AuditBeforeAsk"},
                                           Case{Check::kAudit, Check::kBudget, "AuditBeforeBudget"},
                                           Case{Check::kDecide, Check::kBudget,
                                                "DecideBeforeBudget"},
                                           Case{Check::kAsk, Check::kBudget, "AskBeforeBudget"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sluice::tls_testing
