// token_bench: what a request on a rule that mints a bearer token (inject.oauth2) pays when
// the token is cached: the pipeline step (injectMintedToken: the cache key over the workflow,
// the rule and its secrets' values, the cache lookup, the Authorization header set and the
// copies wiped), and the cache lookup alone (TokenCache::bearer).
//
// The token is fetched once, before timing, from a plain-HTTP token endpoint on 127.0.0.1 (a
// thread answering every request with the same token, lifetime one hour), through the real
// admission; the timed loop runs inside one coroutine on a one-thread io_context, as the
// proxy's request coroutines do.
//
// Run: build-*/bench/token_bench
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <string>
#include <thread>

#include "injection.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "token_source.hpp"

namespace {

using namespace sluice;
using namespace sluice::proxy;

// A token endpoint that answers every request on every connection with one token.
class TinyTokenEndpoint {
 public:
  TinyTokenEndpoint() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::perror("token endpoint");
      std::exit(1);
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TinyTokenEndpoint() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::uint16_t port() const { return port_; }

 private:
  void serve() {
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string got;
      char buf[4096];
      while (got.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<std::size_t>(n));
      }
      const std::string body =
          R"({"access_token":"bench-token-0123456789abcdef","token_type":"Bearer","expires_in":3600})";
      const std::string res =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      (void)::send(c, res.data(), res.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

struct Setup {
  TinyTokenEndpoint endpoint;
  net::io_context ioc{1};
  std::shared_ptr<Context> ctx = std::make_shared<Context>();
  std::shared_ptr<const policy::Matcher> matcher;
  std::shared_ptr<Listener> listener;
  ResolvePool pool{1};

  Setup() {
    const std::string yaml =
        "apiVersion: sluice/v1\nkind: Workflow\nname: bench\negress:\n  rules:\n"
        "    - id: api\n      action: allow\n      hosts: [api.example.com]\n"
        "      tls: inspect\n      allow_plaintext_credentials: true\n"
        "      inject:\n        oauth2:\n"
        "          token_url: http://127.0.0.1:" +
        std::to_string(endpoint.port()) +
        "/token\n"
        "          client_id: ${secret:id}\n          client_secret: ${secret:secret}\n"
        "    - id: token\n      action: allow\n      cidrs: [127.0.0.0/8]\n"
        "      allow_private: true\n      ports: [\"1-65535\"]\n";
    auto w = policy::parseWorkflow(yaml, "bench.yaml");
    if (!w) {
      std::fprintf(stderr, "%s", w.error().str().c_str());
      std::exit(1);
    }
    matcher = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
    ctx->resolver = std::make_shared<StaticResolver>();
    ctx->resolve_pool = &pool;
    ctx->tokens = std::make_shared<TokenCache>();
    listener = std::make_shared<Listener>(ioc, "bench", matcher);
    listener->secrets =
        policy::makeSecretStore({{"id", "bench-client"}, {"secret", "bench-secret-value"}});
  }
  ~Setup() { pool.join(); }

  const policy::Rule& rule() const { return matcher->workflow().rules[0]; }

  // Runs `body` as one coroutine on the io_context, to completion.
  template <typename Body>
  void run(Body body) {
    net::co_spawn(ioc, std::move(body), net::detached);
    ioc.restart();
    ioc.run();
  }
};

void BM_BearerCacheHit(benchmark::State& state) {
  Setup s;
  TokenAsker asker{s.ctx, s.listener, s.matcher};
  bool ok = true;
  s.run([&]() -> net::awaitable<void> {
    ok = (co_await s.ctx->tokens->bearer(asker, s.rule())).has_value();  // the one fetch
    for (auto _ : state) {
      auto t = co_await s.ctx->tokens->bearer(asker, s.rule());
      benchmark::DoNotOptimize(t);
    }
  });
  if (!ok || s.ctx->tokens->fetches() != 1) state.SkipWithError("the token was not cached");
}
BENCHMARK(BM_BearerCacheHit);

void BM_InjectMintedTokenHit(benchmark::State& state) {
  Setup s;
  ConnState conn{s.ctx, s.listener, s.matcher, s.listener->account, {}, {}, false, false};
  policy::Decision d;
  d.allowed = true;
  d.rule = &s.rule();
  d.rule_id = "api";
  std::pmr::unsynchronized_pool_resource pool;
  bool ok = true;
  s.run([&]() -> net::awaitable<void> {
    for (auto _ : state) {
      PmrFields fields{PmrAllocator(&pool)};
      fields.set(http::field::authorization, "Bearer from-the-sandbox");
      InjectionResult inj;
      auto r = co_await injectMintedToken(conn, d, fields, inj);
      ok = ok && !r;
      wipeFields(fields, inj.touched);
      benchmark::DoNotOptimize(fields);
    }
  });
  if (!ok || s.ctx->tokens->fetches() != 1) state.SkipWithError("the token was not cached");
}
BENCHMARK(BM_InjectMintedTokenHit);

}  // namespace

BENCHMARK_MAIN();
