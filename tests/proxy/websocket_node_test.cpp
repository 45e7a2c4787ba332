// WebSocket under inspection with npm's `ws` (pinned in tests/proxy/clients) as client and as a
// TLS server on loopback (clients/ws_placeholder.mjs): the client sends its placeholder in a
// text message, the server gets the real value, its echo reaches the client redacted, and the
// upgrade carries the injected bearer token. The Python client and server, with fragments,
// binary frames, ping/pong and leaks, are websocket_test.cpp.
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "websocket_fixture.hpp"

namespace sluice::tls_testing {
namespace {

TEST_F(WebSocketTest, NpmWsClientSwapsThePlaceholderInATextFrame) {
  if (::access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "node is not installed";
  const std::string cmd =
      "cd " SLUICE_SOURCE_DIR "/tests/proxy/clients && PROXY_PORT=" + std::to_string(port_) +
      " PROXY_CA=" + (dir_ / "proxy-ca.pem").string() +
      " SERVER_CERT=" + (dir_ / "upstream.pem").string() +
      " SERVER_KEY=" + (dir_ / "upstream.key").string() + " HOST=ws.test WS_SECRET=" + kSecret +
      " WS_TOKEN=" + placeholder("WS_TOKEN").token + " timeout 60 node ws_placeholder.mjs 2>&1";
  std::string output;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) output.append(buf, n);
    EXPECT_EQ(::pclose(f), 0) << output;
  }
  EXPECT_EQ(output.find(kSecret), std::string::npos) << "the script printed the secret";
  auto r = nlohmann::json::parse(output, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << output;
  EXPECT_TRUE(r["error"].is_null()) << output;
  for (const char* check :
       {"server_got_secret", "server_never_got_token", "upgrade_injected", "reply_redacted"})
    EXPECT_TRUE(r.value(check, false)) << check << ": " << output;
  EXPECT_EQ(r.value("close_code", 0), 1000) << output;
  proxy_->stop();  // every row written
  int upgrades = 0;
  for (const auto& e : sink_->requests())
    if (e.path == "/ws" && e.status == 101 && e.rule_id == "ws") ++upgrades;
  EXPECT_EQ(upgrades, 1);
}

}  // namespace
}  // namespace sluice::tls_testing
