// Absolute-form HTTP through the proxy, as a hostile client: forwarding and keep-alive,
// hop-by-hop stripping, Host agreement, smuggling shapes, size limits, header deadline,
// policy refusals, upstream failures — each with the status seen and the audit rows written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "proxy_fixture.hpp"

namespace sluice::proxy::testing {
namespace {

using ClientConnectionTest = ProxyFixture;

TEST_F(ClientConnectionTest, ForwardsAbsoluteFormAndAuditsTheRequest) {
  auto r = roundTrip(getRequest(upstream(), "/hello?x=1"));
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("GET /hello?x=1"), std::string::npos) << r.body;
  // The origin gets origin-form and our Host.
  EXPECT_NE(r.body.find("Host: " + upstream()), std::string::npos) << r.body;
  auto req = sink_->waitRequest([](const auto& e) { return e.path == "/hello"; });
  ASSERT_TRUE(req);
  EXPECT_EQ(req->status, 200);
  EXPECT_EQ(req->decision, audit::Decision::kAllow);
  EXPECT_EQ(req->rule_id, "local-upstream");
  EXPECT_EQ(req->method, "GET");
  EXPECT_EQ(req->execution_id, "exec-1");
  EXPECT_EQ(req->workflow, "test");
  proxy_->stop();  // closes the origin connection: its row is written
  auto conn = sink_->waitConnection([&](const auto& e) { return e.id == req->connection_id; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kAllow);
  EXPECT_EQ(conn->kind, audit::ConnectionKind::kHttp);
  EXPECT_EQ(conn->host, "upstream.test");
  EXPECT_EQ(conn->resolved_ip, "127.0.0.1");
  EXPECT_GT(conn->bytes_down, 0u);
  EXPECT_GT(conn->bytes_up, 0u);
}

TEST_F(ClientConnectionTest, KeepAliveOnBothSides) {
  Client c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send(getRequest(upstream(), "/k" + std::to_string(i))));
    auto r = c.readResponse();
    ASSERT_EQ(r.status, 200) << i;
    EXPECT_FALSE(r.closed);
  }
  // Three requests, one origin connection.
  EXPECT_EQ(up_.httpLog().accepted.load(), 1);
}

TEST_F(ClientConnectionTest, PipelinedRequestsAreAnsweredInOrder) {
  Client c(port_);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/first") + getRequest(upstream(), "/second")));
  auto a = c.readResponse();
  auto b = c.readResponse();
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  EXPECT_NE(a.body.find("/first"), std::string::npos);
  EXPECT_NE(b.body.find("/second"), std::string::npos);
}

TEST_F(ClientConnectionTest, Http10ClientGetsItsConnectionClosed) {
  Client c(port_);
  ASSERT_TRUE(
      c.send("GET http://" + upstream() + "/old HTTP/1.0\r\nHost: " + upstream() + "\r\n\r\n"));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(c.waitClosed());
}

TEST_F(ClientConnectionTest, AClientThatClosesIsToldSoInTheResponse) {
  Client c(port_);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/bye", "Connection: close\r\n")));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_TRUE(c.waitClosed());
}

TEST_F(ClientConnectionTest, SwitchingToAnotherOriginOpensANewConnection) {
  Client c(port_);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/a")));
  ASSERT_EQ(c.readResponse().status, 200);
  std::string other = "other.test:" + std::to_string(up_.httpPort());
  ASSERT_TRUE(c.send(getRequest(other, "/b")));
  auto r = c.readResponse();
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("Host: " + other), std::string::npos) << r.body;
  EXPECT_EQ(up_.httpLog().accepted.load(), 2);
  // The first origin connection's row is written when it is replaced.
  EXPECT_TRUE(sink_->waitConnection([](const auto& e) {
    return e.kind == audit::ConnectionKind::kHttp && e.decision == audit::Decision::kAllow;
  }));
}

TEST_F(ClientConnectionTest, ChunkedResponseAndRequestBodiesStream) {
  auto r = roundTrip(getRequest(upstream(), "/chunked"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello world");
  std::string post = "POST http://" + upstream() + "/p HTTP/1.1\r\nHost: " + upstream() +
                     "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n";
  auto p = roundTrip(post);
  ASSERT_EQ(p.status, 200);
  EXPECT_NE(p.body.find("body-bytes: 7"), std::string::npos) << p.body;
  std::string cl = "PUT http://" + upstream() + "/p HTTP/1.1\r\nHost: " + upstream() +
                   "\r\nContent-Length: 5\r\n\r\nhello";
  auto q = roundTrip(cl);
  ASSERT_EQ(q.status, 200);
  EXPECT_NE(q.body.find("body-bytes: 5"), std::string::npos) << q.body;
}

TEST_F(ClientConnectionTest, LargeResponseArrivesWhole) {
  auto r = roundTrip(getRequest(upstream(), "/big/3000000"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.size(), 3000000u);
}

TEST_F(ClientConnectionTest, HeadResponseHasNoBody) {
  Client c(port_);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/h", "", "HEAD")));
  auto r = c.readResponse(true);
  ASSERT_EQ(r.status, 200);
  // The connection is still usable: the next response parses.
  ASSERT_TRUE(c.send(getRequest(upstream(), "/after-head")));
  auto r2 = c.readResponse();
  EXPECT_EQ(r2.status, 200);
  EXPECT_NE(r2.body.find("/after-head"), std::string::npos);
}

TEST_F(ClientConnectionTest, StripsHopByHopFieldsBothWays) {
  auto r = roundTrip(getRequest(upstream(), "/hop",
                                "Connection: keep-alive, X-Hop-Secret\r\n"
                                "X-Hop-Secret: 1\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\n"
                                "Proxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                                "TE: trailers\r\nTrailer: X-T\r\nUpgrade: websocket\r\n"
                                "X-Kept: yes\r\n"));
  ASSERT_EQ(r.status, 200);
  for (auto name : {"X-Hop-Secret", "Proxy-Authorization", "Proxy-Connection", "Keep-Alive",
                    "TE:", "Trailer", "Upgrade"})
    EXPECT_EQ(r.body.find(name), std::string::npos) << name << " leaked:\n" << r.body;
  EXPECT_NE(r.body.find("X-Kept: yes"), std::string::npos);
  // Response side: the upstream's Connection-listed field and Keep-Alive are gone.
  EXPECT_EQ(r.header("x-upstream-hop"), "");
  EXPECT_EQ(r.header("keep-alive"), "");
}

TEST_F(ClientConnectionTest, ConnectionListCannotStripFraming) {
  std::string req = "POST http://" + upstream() + "/p HTTP/1.1\r\nHost: " + upstream() +
                    "\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello";
  auto r = roundTrip(req);
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("body-bytes: 5"), std::string::npos) << r.body;
}

TEST_F(ClientConnectionTest, AbsoluteFormTargetWinsOverADifferingHost) {
  // RFC 9112 3.2.2: a proxy ignores the Host of an absolute-form request and sends the
  // target's authority upstream (wrk and some libraries send the proxy's address as Host).
  std::string req = "GET http://" + upstream() + "/ HTTP/1.1\r\nHost: other.test\r\n\r\n";
  auto r = roundTrip(req);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("Host: " + upstream()), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("other.test"), std::string::npos) << r.body;
  std::string port_differs =
      "GET http://" + upstream() + "/ HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\r\n";
  EXPECT_EQ(roundTrip(port_differs).status, 200);
  // A duplicate Host is still malformed.
  std::string dup = "GET http://" + upstream() + "/ HTTP/1.1\r\nHost: " + upstream() +
                    "\r\nHost: " + upstream() + "\r\n\r\n";
  EXPECT_EQ(roundTrip(dup).status, 400);
}

struct BadRequestCase {
  const char* name;
  std::string raw;  // {A} is replaced with the upstream authority
  int status;
};

class SmugglingTest : public ProxyFixture, public ::testing::WithParamInterface<BadRequestCase> {};

TEST_P(SmugglingTest, IsRefusedWithoutReachingTheUpstream) {
  std::string raw = GetParam().raw;
  for (std::size_t pos; (pos = raw.find("{A}")) != std::string::npos;)
    raw.replace(pos, 3, upstream());
  Client c(port_);
  ASSERT_TRUE(c.send(raw));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, GetParam().status) << GetParam().name;
  EXPECT_FALSE(r.header("x-sluice-reason").empty());
  EXPECT_TRUE(r.closed) << "a malformed request must end the connection";
  EXPECT_EQ(up_.httpLog().accepted.load(), 0) << GetParam().name;
  auto row =
      sink_->waitConnection([](const auto& e) { return e.decision == audit::Decision::kDeny; });
  EXPECT_TRUE(row) << "no audit row for " << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SmugglingTest,
    ::testing::Values(
        BadRequestCase{"ClAndTe",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: 4\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                       400},
        BadRequestCase{"TeAndCl",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nTransfer-Encoding: chunked\r\n"
                       "Content-Length: 4\r\n\r\n0\r\n\r\n",
                       400},
        BadRequestCase{"DuplicateClSameValue",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: 3\r\n"
                       "Content-Length: 3\r\n\r\nabc",
                       400},
        BadRequestCase{"DuplicateClDifferent",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: 3\r\n"
                       "Content-Length: 4\r\n\r\nabcd",
                       400},
        BadRequestCase{"ClList",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: 3, 3\r\n\r\nabc",
                       400},
        BadRequestCase{"ClNegative",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: -1\r\n\r\n", 400},
        BadRequestCase{"ClPlus",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: +3\r\n\r\nabc",
                       400},
        BadRequestCase{"ClHex",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nContent-Length: 0x3\r\n\r\nabc",
                       400},
        BadRequestCase{"UnknownCoding",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nTransfer-Encoding: gzip\r\n\r\n",
                       501},
        BadRequestCase{"ChunkedNotLast",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\n"
                       "Transfer-Encoding: chunked, identity\r\n\r\n",
                       501},
        BadRequestCase{"DuplicateTe",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nTransfer-Encoding: chunked\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                       400},
        BadRequestCase{"TeWithSpaceBeforeColon",
                       "POST http://{A}/ HTTP/1.1\r\nHost: {A}\r\nTransfer-Encoding : chunked\r\n"
                       "\r\n0\r\n\r\n",
                       400},
        BadRequestCase{"ObsFold",
                       "GET http://{A}/ HTTP/1.1\r\nHost: {A}\r\nX-A: 1\r\n folded\r\n\r\n", 400},
        BadRequestCase{"BareLf", "GET http://{A}/ HTTP/1.1\nHost: {A}\n\n", 400},
        BadRequestCase{
            "NulInHeader",
            std::string("GET http://{A}/ HTTP/1.1\r\nHost: {A}\r\nX-A: a\0b\r\n\r\n",
                        sizeof("GET http://{A}/ HTTP/1.1\r\nHost: {A}\r\nX-A: a\0b\r\n\r\n") - 1),
            400},
        BadRequestCase{"OriginForm", "GET / HTTP/1.1\r\nHost: {A}\r\n\r\n", 400},
        BadRequestCase{"AsteriskForm", "OPTIONS * HTTP/1.1\r\nHost: {A}\r\n\r\n", 400},
        BadRequestCase{"UserinfoInUrl", "GET http://user:pw@{A}/ HTTP/1.1\r\nHost: {A}\r\n\r\n",
                       400},
        BadRequestCase{"FtpScheme", "GET ftp://{A}/ HTTP/1.1\r\nHost: {A}\r\n\r\n", 400},
        BadRequestCase{"HttpsAbsoluteForm", "GET https://{A}/ HTTP/1.1\r\nHost: {A}\r\n\r\n", 400},
        BadRequestCase{"SpaceInTarget", "GET http://{A}/a b HTTP/1.1\r\nHost: {A}\r\n\r\n", 400},
        BadRequestCase{"BadVersion", "GET http://{A}/ HTTP/2.0\r\nHost: {A}\r\n\r\n", 400},
        BadRequestCase{"Http09", "GET http://{A}/\r\n\r\n", 400},
        BadRequestCase{"ConnectWithoutPort", "CONNECT upstream.test HTTP/1.1\r\n\r\n", 400},
        BadRequestCase{"ConnectBadPort", "CONNECT upstream.test:99999 HTTP/1.1\r\n\r\n", 400},
        BadRequestCase{"ConnectHostMismatch", "CONNECT {A} HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
                       400}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(ClientConnectionTest, OversizedHeaderGets431) {
  std::string big(10 * 1024, 'a');
  auto r = roundTrip(getRequest(upstream(), "/", "X-Big: " + big + "\r\n"));
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(r.header("x-sluice-reason"), "header_too_large");
  EXPECT_TRUE(sink_->waitConnection([](const auto& e) { return e.reason == "header_too_large"; }));
  // Unterminated and endless: refused as soon as the limit is passed, not at the deadline.
  Client c(port_);
  ASSERT_TRUE(c.send("GET http://" + upstream() + "/ HTTP/1.1\r\nX: " + big));
  EXPECT_EQ(c.readResponse().status, 431);
}

TEST_F(ClientConnectionTest, TrickledHeaderIsCutOffAtTheDeadline) {
  Client c(port_);
  ASSERT_TRUE(c.send("GET http://" + upstream() + "/ HTTP/1.1\r\n"));
  // Keep sending a byte now and then, never finishing (bounded: at most 30 x 100 ms).
  Response r;
  for (int i = 0; i < 30; ++i) {
    if (!c.send("X")) break;
    pollfd pfd{c.fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) > 0) break;
  }
  r = c.readResponse();
  EXPECT_EQ(r.status, 408);
  EXPECT_EQ(r.header("x-sluice-reason"), "header_timeout");
  EXPECT_TRUE(sink_->waitConnection([](const auto& e) { return e.reason == "header_timeout"; }));
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
}

// The limit is the larger of the proxy's max_body_bytes (1 MiB here) and the workflow's
// max_bytes_out (10 MiB by default): a 20 MB body is refused at its header.
TEST_F(ClientConnectionTest, BodyOverTheLimitGets413) {
  std::string req = "POST http://" + upstream() + "/ HTTP/1.1\r\nHost: " + upstream() +
                    "\r\nContent-Length: 20000000\r\n\r\n";
  auto r = roundTrip(req);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("exceeds 10485760 bytes"), std::string::npos) << r.body;
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
}

TEST_F(ClientConnectionTest, PolicyDenialIsReadableAndAudited) {
  auto r = roundTrip(getRequest("nothing.test:80", "/x"));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.header("x-sluice-reason"), "no_matching_rule");
  EXPECT_EQ(r.header("content-type"), "application/json");
  auto body = nlohmann::json::parse(r.body);
  EXPECT_EQ(body["error"], "denied");
  EXPECT_EQ(body["workflow"], "test");
  EXPECT_EQ(body["reason"], "no_matching_rule");
  EXPECT_TRUE(body.contains("rule"));
  EXPECT_FALSE(body["detail"].get<std::string>().empty());
  auto req = sink_->waitRequest([](const auto& e) { return e.host == "nothing.test"; });
  ASSERT_TRUE(req);
  EXPECT_EQ(req->status, 403);
  EXPECT_EQ(req->decision, audit::Decision::kDeny);
  EXPECT_EQ(req->path, "/x");
  auto conn = sink_->waitConnection([&](const auto& e) { return e.id == req->connection_id; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kDeny);
  auto stats = proxy_->stats("exec-1");
  EXPECT_EQ(stats.denied, 1u);
  ASSERT_EQ(stats.denials.size(), 1u);
  EXPECT_EQ(stats.denials[0].host, "nothing.test");
  EXPECT_EQ(stats.denials[0].reason, "no_matching_rule");
}

TEST_F(ClientConnectionTest, MethodAndPathDenyRulesApplyToPlainHttp) {
  auto del = roundTrip(getRequest(upstream(), "/thing", "", "DELETE"));
  EXPECT_EQ(del.status, 403);
  EXPECT_EQ(del.header("x-sluice-reason"), "denied_by_rule");
  EXPECT_EQ(nlohmann::json::parse(del.body)["rule"], "no-delete");
  auto admin = roundTrip(getRequest(upstream(), "/admin/users"));
  EXPECT_EQ(admin.status, 403);
  EXPECT_EQ(nlohmann::json::parse(admin.body)["rule"], "no-admin");
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
  // A refusal keeps the client connection usable.
  Client c(port_);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/admin/x")));
  EXPECT_EQ(c.readResponse().status, 403);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/fine")));
  EXPECT_EQ(c.readResponse().status, 200);
}

TEST_F(ClientConnectionTest, UnreachableUpstreamGets502WithWhy) {
  // A port nobody listens on: bind one, close it.
  std::uint16_t dead;
  {
    net::io_context ioc;
    tcp::acceptor a(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    dead = a.local_endpoint().port();
  }
  auto r = roundTrip(getRequest("upstream.test:" + std::to_string(dead), "/"));
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.header("x-sluice-reason"), "upstream_error");
  EXPECT_NE(nlohmann::json::parse(r.body)["detail"].get<std::string>().find("refused"),
            std::string::npos)
      << r.body;
  // A name the resolver does not know: 502 naming the resolution failure.
  auto r2 = roundTrip(getRequest("b.example.com:80", "/"));
  EXPECT_EQ(r2.status, 502);
  EXPECT_NE(r2.body.find("resolve"), std::string::npos) << r2.body;
}

TEST_F(ClientConnectionTest, SilentUpstreamGets504) {
  auto r = roundTrip(getRequest(upstream(), "/slow"));
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(r.header("x-sluice-reason"), "upstream_timeout");
  EXPECT_TRUE(sink_->waitRequest([](const auto& e) { return e.status == 504; }));
}

TEST_F(ClientConnectionTest, UpstreamResetMidResponseClosesTheClient) {
  Client c(port_);
  ASSERT_TRUE(c.send(getRequest(upstream(), "/reset")));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_LT(r.body.size(), 1000000u);  // truncated: the client can tell
  auto conn = sink_->waitConnection([](const auto& e) { return e.reason == "upstream_error"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->decision, audit::Decision::kAllow);
}

TEST_F(ClientConnectionTest, ExpectContinueIsAnsweredByTheProxy) {
  Client c(port_);
  ASSERT_TRUE(c.send("POST http://" + upstream() + "/e HTTP/1.1\r\nHost: " + upstream() +
                     "\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  auto interim = c.readResponse(true);
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(c.send("abc"));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("body-bytes: 3"), std::string::npos);
  EXPECT_EQ(r.body.find("Expect"), std::string::npos);
}

TEST_F(ClientConnectionTest, UnhealthyAuditStoreFailsClosed) {
  sink_->setHealthy(false);
  EXPECT_EQ(roundTrip(getRequest(upstream(), "/")).status, 503);
  Client c(port_);
  ASSERT_TRUE(c.send(connectRequest(echo())));
  EXPECT_EQ(c.readResponse().status, 503);
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
  EXPECT_EQ(up_.echoLog().accepted.load(), 0);
}

}  // namespace
}  // namespace sluice::proxy::testing
