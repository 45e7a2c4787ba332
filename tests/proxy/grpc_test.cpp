// gRPC through an inspected tunnel: @grpc/grpc-js (pinned in tests/proxy/clients) as client and
// server on loopback (clients/grpc_h2.mjs), the client going through the proxy with an HTTP
// CONNECT. HTTP/2 on both sides of the proxy: a unary call arrives with the injected
// authorization metadata and its trailers come back, a server-streaming call streams, a method
// a deny rule names is refused (PERMISSION_DENIED, never reaching the server) while the other
// calls on the same channel work; every call is a requests row.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "https_upstream.hpp"
#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::tls_testing {
namespace {

namespace fs = std::filesystem;
using proxy::testing::FakeSink;

constexpr const char* kSecret = "grpc-secret-5e1a9c";

constexpr const char* kPolicy = R"(apiVersion: sluice/v1
kind: Workflow
name: grpc-test
egress:
  rules:
    - id: grpc
      action: allow
      hosts: [grpc.test]
      ports: ["1-65535"]
      allow_private: true
      cidrs: ["127.0.0.0/8"]
      tls: inspect
      methods: [POST]
      paths: ["/test.Echo/*"]
      inject:
        headers:
          Authorization: "Bearer ${secret:grpc_token}"
    - id: grpc-admin
      action: deny
      hosts: [grpc.test]
      ports: ["1-65535"]
      paths: ["/test.Echo/Admin"]
)";

// grpc-js status codes.
constexpr int kOk = 0;
constexpr int kPermissionDenied = 7;

class GrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-grpc-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "upstream-ca.pem") << pki_.caPem();
    auto leaf = pki_.leaf({"grpc.test"});
    std::ofstream(dir_ / "server.crt") << leaf.cert_pem;
    std::ofstream(dir_ / "server.key") << leaf.key_pem;
    auto ca = proxy::CertificateAuthority::createEphemeral("sluice grpc test CA");
    ASSERT_TRUE(ca) << ca.error();
    std::ofstream(dir_ / "proxy-ca.pem") << (*ca)->certificatePem();

    auto w = policy::parseWorkflow(kPolicy, "grpc-test.yaml");
    ASSERT_TRUE(w) << w.error().str();
    sink_ = std::make_shared<FakeSink>();
    auto resolver = std::make_shared<proxy::StaticResolver>();
    resolver->add("grpc.test", {*policy::parseIpLiteral("127.0.0.1")});
    auto p = proxy::Proxy::create(inspectingOptions(*ca, (dir_ / "upstream-ca.pem").string()),
                                  sink_, resolver);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy::ListenerIdentity id;
    id.execution_id = "exec-grpc";
    id.matcher = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
    id.secrets = policy::makeSecretStore({{"grpc_token", kSecret}});
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

  // Runs clients/grpc_h2.mjs (the server closing connections idle for `server_idle_ms`, when
  // not 0); its JSON results (discarded on failure).
  nlohmann::json runClient(int server_idle_ms = 0) {
    if (server_idle_ms)
      ::setenv("SERVER_IDLE_MS", std::to_string(server_idle_ms).c_str(), 1);
    else
      ::unsetenv("SERVER_IDLE_MS");
    ::setenv("GRPC_PROXY_URL", ("http://127.0.0.1:" + std::to_string(port_)).c_str(), 1);
    ::setenv("PROXY_CA", (dir_ / "proxy-ca.pem").c_str(), 1);
    ::setenv("SERVER_CERT", (dir_ / "server.crt").c_str(), 1);
    ::setenv("SERVER_KEY", (dir_ / "server.key").c_str(), 1);
    ::setenv("HOST", "grpc.test", 1);
    ::setenv("EXPECTED_AUTH", (std::string("Bearer ") + kSecret).c_str(), 1);
    const std::string cmd = std::string("timeout 60 node ") + SLUICE_SOURCE_DIR +
                            "/tests/proxy/clients/grpc_h2.mjs 2>&1";
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
      ::pclose(f);
    }
    auto j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    EXPECT_EQ(out.find(kSecret), std::string::npos);
    return j;
  }

  TestPki pki_;
  fs::path dir_;
  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::uint16_t port_ = 0;
};

TEST_F(GrpcTest, UnaryStreamingAndDeniedCallsOnOneChannel) {
  auto r = runClient();
  ASSERT_FALSE(r.is_discarded());
  EXPECT_EQ(r["unary"]["code"], kOk) << r.dump();
  EXPECT_EQ(r["unary"]["value"], "pong:ping");
  EXPECT_EQ(r["unary"]["trailers"], nlohmann::json::array({"grpc-test"}))
      << "the server's trailers reach the client";
  EXPECT_EQ(r["unary_auth_ok"], true) << "the server saw the injected authorization metadata";
  EXPECT_EQ(r["watch"]["code"], kOk) << r.dump();
  EXPECT_EQ(r["watch"]["messages"],
            nlohmann::json::array({"tick0", "tick1", "tick2", "tick3", "tick4"}));
  EXPECT_EQ(r["admin"]["code"], kPermissionDenied) << r.dump();
  EXPECT_EQ(r["admin_reached"], false);
  EXPECT_EQ(r["again"]["code"], kOk) << "a denied call does not hurt the channel";

  auto admin =
      sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/test.Echo/Admin"; });
  ASSERT_TRUE(admin);
  EXPECT_EQ(admin->decision, audit::Decision::kDeny);
  EXPECT_EQ(admin->rule_id, "grpc-admin");
  EXPECT_EQ(admin->status, 403);
  auto unary =
      sink_->waitRequest([](const audit::RequestEvent& e) { return e.path == "/test.Echo/Unary"; });
  ASSERT_TRUE(unary);
  EXPECT_EQ(unary->method, "POST");
  EXPECT_EQ(unary->status, 200);
  EXPECT_EQ(unary->injected_secrets, std::vector<std::string>{"grpc_token"});
  for (const auto& e : sink_->requests()) EXPECT_EQ(e.connection_id, unary->connection_id);
}

// The server closes the proxy's idle upstream connection (GOAWAY); the client's channel to the
// proxy stays, and its next call goes out on a new upstream connection, vetted and verified.
TEST_F(GrpcTest, ACallAfterTheUpstreamClosedAnIdleConnectionGoesOutOnANewOne) {
  auto r = runClient(/*server_idle_ms=*/300);
  ASSERT_FALSE(r.is_discarded());
  EXPECT_EQ(r["unary"]["code"], kOk) << r.dump();
  EXPECT_EQ(r["after_idle"]["code"], kOk) << r.dump();
  EXPECT_EQ(r["after_idle"]["value"], "pong:ping3");
  EXPECT_EQ(r["after_idle"]["trailers"], nlohmann::json::array({"grpc-test"}));
  auto last = sink_->waitRequest([](const audit::RequestEvent& e) {
    return e.status == 200 && e.path == "/test.Echo/Unary" && e.decision == audit::Decision::kAllow;
  });
  ASSERT_TRUE(last);
}

}  // namespace
}  // namespace sluice::tls_testing
