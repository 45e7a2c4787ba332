// The inspecting proxy of the WebSocket tests (websocket_test.cpp with Python's `websockets`,
// websocket_node_test.cpp with npm's `ws`): a listener whose rule `ws` injects a bearer token on
// the upgrade and swaps its placeholder (WS_TOKEN) in client text frames, and a rule `other`
// with a placeholder of its own; a test CA for the upstream (upstream.pem / upstream.key for
// ws.test and other.test, both resolved to 127.0.0.1) and the proxy's CA in proxy-ca.pem.
#pragma once

#include "inspecting_fixture.hpp"

namespace sluice::tls_testing {

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

class WebSocketTest : public InspectingProxyTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(startProxy(kPolicy, {"ws.test", "other.test"},
                                       {{"ws_key", kSecret}, {"other_key", "other-value"}},
                                       "exec-tls-ws"));
    ASSERT_EQ(placeholders_.size(), 2u);
  }
};

}  // namespace sluice::tls_testing
