// The pipeline against upstreams that misbehave on purpose (a scripted raw-socket server):
// reflecting an injected secret in a 1xx, the reason phrase or a header; answering a request
// twice; and a client whose chunked body breaks after the header went upstream.
#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "proxy_fixture.hpp"
#include "sluice/policy/secrets.hpp"

namespace sluice::proxy::testing {
namespace {

constexpr const char* kSecret = "s3cr3t-TOKEN-0123456789";

// Accepts connections on loopback; for every request head it reads, records it and writes
// what `script` returns (the request head in, raw response bytes out).
class ScriptedUpstream {
 public:
  explicit ScriptedUpstream(std::function<std::string(const std::string&)> script)
      : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~ScriptedUpstream() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }
  std::vector<std::string> heads() {
    std::lock_guard lock(mu_);
    return heads_;
  }
  int accepted() const { return accepted_.load(); }

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++accepted_;
      std::thread([this, c] { serve(c); }).detach();
    }
  }
  void serve(int c) {
    timeval tv{2, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string buf;
    char tmp[4096];
    for (;;) {
      auto end = buf.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = buf.substr(0, end + 4);
        buf.erase(0, end + 4);
        {
          std::lock_guard lock(mu_);
          heads_.push_back(head);
        }
        std::string out = script_(head);
        ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
        continue;
      }
      ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) break;
      buf.append(tmp, static_cast<std::size_t>(n));
    }
    ::close(c);
  }

  std::function<std::string(const std::string&)> script_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::vector<std::string> heads_;
};

// A listener whose rule injects `Authorization: Bearer <secret>` into plain HTTP.
class HostileUpstreamTest : public ProxyFixture {
 protected:
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: hostile\negress:\n  rules:\n"
           "    - id: api\n      action: allow\n      hosts: [upstream.test]\n"
           "      ports: [\"1-65535\"]\n      allow_private: true\n"
           "      cidrs: [\"127.0.0.0/8\"]\n      allow_plaintext_credentials: true\n"
           "      inject:\n        headers:\n          Authorization: \"Bearer ${secret:tok}\"\n";
  }
  std::uint16_t injectingListener() {
    auto store = policy::makeSecretStore({{"tok", kSecret}});
    auto port = proxy_->listen("127.0.0.1", 0, ListenerIdentity{"exec-inj", matcher_, store});
    EXPECT_TRUE(port);
    return port ? *port : 0;
  }
  static std::string get(std::uint16_t up, const std::string& path, const std::string& extra = "") {
    std::string a = "upstream.test:" + std::to_string(up);
    return "GET http://" + a + path + " HTTP/1.1\r\nHost: " + a + "\r\n" + extra + "\r\n";
  }
};

TEST_F(HostileUpstreamTest, ReflectedSecretNeverReachesTheClient) {
  ScriptedUpstream up([](const std::string& head) {
    // Echo the Authorization value everywhere a header section can carry text.
    auto at = head.find("Authorization: ");
    std::string v =
        at == std::string::npos ? "none" : head.substr(at + 15, head.find("\r\n", at) - at - 15);
    return "HTTP/1.1 103 Early " + v + "\r\nLink: <" + v + ">\r\n\r\n" + "HTTP/1.1 200 Fine " + v +
           "\r\nX-Echo: " + v + "\r\nContent-Length: 2\r\n\r\nok";
  });
  Client c(injectingListener(), std::chrono::milliseconds(500));
  ASSERT_TRUE(c.send(get(up.port(), "/")));
  std::string all = c.readN(4096);  // everything that arrives before the read times out
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.find(kSecret), std::string::npos) << all;
  EXPECT_NE(all.find("103"), std::string::npos) << all;
  EXPECT_NE(all.find("[redacted by sluice]"), std::string::npos) << all;
  // ...while the upstream did get it.
  auto heads = up.heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Bearer ") + kSecret), std::string::npos);
  auto row = sink_->waitRequest([](const auto& e) { return e.execution_id == "exec-inj"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->injected_secrets, std::vector<std::string>{"tok"});
}

TEST_F(HostileUpstreamTest, ConnectionListCannotStripTheInjectedHeader) {
  ScriptedUpstream up([](const std::string&) {
    return std::string("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  });
  Client c(injectingListener());
  ASSERT_TRUE(c.send(get(up.port(), "/", "Connection: Authorization\r\n")));
  EXPECT_EQ(c.readResponse().status, 200);
  auto heads = up.heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Authorization: Bearer ") + kSecret), std::string::npos)
      << heads[0];
}

TEST_F(HostileUpstreamTest, AnUpstreamThatAnswersTwiceIsNotReused) {
  // Two responses to one request (as a body-ignoring upstream gives after smuggling): the
  // second must never be handed to the client's next request.
  ScriptedUpstream up([](const std::string& head) {
    if (head.find("GET /first") == 0)
      return std::string(
          "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
          "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled");
    return std::string("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond");
  });
  Client c(injectingListener());
  ASSERT_TRUE(c.send(get(up.port(), "/first")));
  auto r1 = c.readResponse();
  EXPECT_EQ(r1.body, "first");
  // Let the extra bytes arrive before the next request.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(c.send(get(up.port(), "/second")));
  auto r2 = c.readResponse();
  EXPECT_EQ(r2.body, "second");
  EXPECT_EQ(up.accepted(), 2) << "the connection that sent unasked-for bytes was reused";
}

TEST_F(HostileUpstreamTest, BrokenChunkedBodyIsAnsweredAndAudited) {
  ScriptedUpstream up([](const std::string&) { return std::string(); });  // never answers
  Client c(injectingListener());
  std::string a = "upstream.test:" + std::to_string(up.port());
  ASSERT_TRUE(c.send("POST http://" + a + "/upload HTTP/1.1\r\nHost: " + a +
                     "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZZ\r\n"));
  auto r = c.readResponse();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.header("x-sluice-reason"), "invalid_request");
  // The header (with the injected secret) went upstream: the row says so.
  auto row = sink_->waitRequest([](const auto& e) { return e.path == "/upload"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->status, 400);
  // Refused by the proxy after the policy allowed it: a denial, as the receipt counts it.
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
  EXPECT_EQ(row->reason, "invalid_request");
  EXPECT_EQ(row->injected_secrets, std::vector<std::string>{"tok"});
  for (int i = 0; i < 100 && up.heads().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(up.heads().size(), 1u);
}

// Write-ahead: a request is on record (a forwards row, with the injected secret's name) by the
// time the upstream has its header, while the exchange is still open; the requests row
// completes it when the exchange ends.
TEST_F(HostileUpstreamTest, ARequestIsOnRecordBeforeTheUpstreamAnswers) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::size_t forwards_seen = 0, requests_seen = 0;
  ScriptedUpstream up([&](const std::string&) {
    forwards_seen = sink_->forwards().size();
    requests_seen = sink_->requests().size();
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return release; });
    return std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  Client c(injectingListener());
  ASSERT_TRUE(c.send(get(up.port(), "/slow")));
  for (int i = 0; i < 200 && up.heads().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(up.heads().size(), 1u);
  EXPECT_EQ(forwards_seen, 1u);
  EXPECT_EQ(requests_seen, 0u);
  auto f = sink_->forwards();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].path, "/slow");
  EXPECT_EQ(f[0].method, "GET");
  EXPECT_EQ(f[0].attempt, 1);
  EXPECT_EQ(f[0].injected_secrets, std::vector<std::string>{"tok"});
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(c.readResponse().status, 200);
  auto row = sink_->waitRequest([](const auto& e) { return e.path == "/slow"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->ts_ms, f[0].ts_ms);
  EXPECT_EQ(row->connection_id, f[0].connection_id);
}

// The "after a 1xx" carrier: an upstream that sends an interim response before every answer.
// The next request on the kept-alive connection is still decided like a fresh one.
class InterimUpstreamTest : public ProxyFixture {
 protected:
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: interim\negress:\n  rules:\n"
           "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
           "    - {id: no-delete, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       methods: [DELETE]}\n"
           "    - {id: no-admin, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       paths: [\"/admin/*\"]}\n";
  }
};

TEST_F(InterimUpstreamTest, RequestsAfterAnInterimResponseAreStillJudged) {
  ScriptedUpstream up([](const std::string&) {
    return std::string(
        "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  const std::string a = "upstream.test:" + std::to_string(up.port());
  auto req = [&](const std::string& method, const std::string& path) {
    return method + " http://" + a + path + " HTTP/1.1\r\nHost: " + a +
           "\r\nContent-Length: 0\r\n\r\n";
  };
  Client c(port_);
  ASSERT_TRUE(c.send(req("GET", "/ok")));
  auto interim = c.readResponse();
  EXPECT_EQ(interim.status, 103);
  EXPECT_EQ(c.readResponse().status, 200);
  for (auto [method, path, reason] : {std::tuple{"DELETE", "/ok", "denied_by_rule"},
                                      std::tuple{"GET", "/x/../admin/a", "denied_by_rule"},
                                      std::tuple{"GET", "/%2e%2e/admin/a", "ambiguous_target"}}) {
    SCOPED_TRACE(std::string(method) + " " + path);
    ASSERT_TRUE(c.send(req(method, path)));
    auto r = c.readResponse();
    EXPECT_GE(r.status, 400);
    EXPECT_EQ(r.header("x-sluice-reason"), reason);
    if (r.closed) break;
  }
  auto heads = up.heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(heads[0].rfind("GET /ok ", 0), 0u);
}

}  // namespace
}  // namespace sluice::proxy::testing
