// WebSocket under inspection, end to end with Python's `websockets` as client and as a TLS
// server on loopback (tests/proxy/websocket_through_proxy.py): the upgrade rule's placeholder
// is swapped in client text frames (whole and fragmented), the server's echo of the secret is
// redacted before the client sees it, binary frames, ping/pong and close pass, permessage-deflate
// is not negotiated, a token of another rule closes the WebSocket with 1008, and the bytes are
// counted in the connection's audit row. Frame parsing as a unit is websocket_frames_test.cpp.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "websocket_fixture.hpp"

namespace sluice::tls_testing {
namespace {

TEST_F(WebSocketTest, PythonClientAndServerThroughTheInspectedRelay) {
  if (::system("/usr/bin/python3 -c 'import websockets' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-websockets is not installed (scripts/install-deps.sh)";
  ::setenv("WS_SECRET", kSecret, 1);  // the verifying server's copy
  ::setenv("WS_TOKEN", placeholder("WS_TOKEN").token.c_str(), 1);
  ::setenv("OTHER_TOKEN", placeholder("OTHER_TOKEN").token.c_str(), 1);
  const std::string cmd =
      "/usr/bin/python3 " SLUICE_SOURCE_DIR "/tests/proxy/websocket_through_proxy.py " +
      std::to_string(port_) + " " + (dir_ / "proxy-ca.pem").string() + " " +
      (dir_ / "upstream.pem").string() + " " + (dir_ / "upstream.key").string() + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string output;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) output.append(buf, n);
  EXPECT_EQ(::pclose(f), 0) << output;
  ::unsetenv("WS_SECRET");
  EXPECT_EQ(output.find(kSecret), std::string::npos) << "the script printed the secret";
  auto r = nlohmann::json::parse(output, nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << output;
  for (const char* check :
       {"server_got_secret", "server_got_fragmented_secret", "server_never_got_token",
        "server_never_got_other_token", "binary_unchanged", "binary_echo_ok", "extensions_stripped",
        "reply_redacted", "fragmented_reply_redacted", "client_never_saw_secret", "pong",
        "before_leak_ok"})
    EXPECT_TRUE(r.value(check, false)) << check << ": " << output;
  EXPECT_EQ(r.value("normal_close_code", 0), 1000) << output;
  EXPECT_EQ(r.value("leak_close_code", 0), 1008) << output;
  EXPECT_FALSE(r.value("after_leak_reply", true)) << output;
  proxy_->stop();  // every connection row written
  int relayed = 0, leaked = 0;
  for (const auto& c : sink_->connections()) {
    if (c.host != "ws.test") continue;
    EXPECT_GT(c.bytes_up, 0u);
    EXPECT_GT(c.bytes_down, 0u);
    ++relayed;
    if (c.reason == "placeholder_leak") ++leaked;
    EXPECT_EQ(c.detail.find(kSecret), std::string::npos);
  }
  EXPECT_EQ(relayed, 2) << "one connections row per WebSocket";
  EXPECT_EQ(leaked, 1) << "the leak attempt is noted on its connection's row";
  int upgrades = 0;
  for (const auto& e : sink_->requests())
    if (e.path == "/ws" && e.status == 101) ++upgrades;
  EXPECT_EQ(upgrades, 2);
}

}  // namespace
}  // namespace sluice::tls_testing
