// approval_bench: what the approval desk itself adds to a request (bench/approval_latency.sh
// runs it). An in-process proxy with an ApprovalDesk whose watcher answers every approval at
// once (from a thread of its own, as an approver would), a loopback HTTP upstream, and a client
// that sends N fresh-connection GETs through the proxy alternately to a host on an allow rule
// and to one on an ask rule. Prints the medians and p99s. Usage: approval_bench [N]
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/approvals.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/proxy/resolver.hpp"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

int listenLoopback(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0) {
    std::perror("upstream");
    std::exit(1);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// Reads until the end of an HTTP head (and, for a response, its 2-byte body "ok").
bool readHead(int fd, std::string& got) {
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

double oneGet(std::uint16_t proxy_port, const std::string& host, std::uint16_t up_port) {
  const auto t0 = Clock::now();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(proxy_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::exit(1);
  const std::string authority = host + ":" + std::to_string(up_port);
  const std::string req = "GET http://" + authority + "/x HTTP/1.1\r\nHost: " + authority +
                          "\r\nConnection: close\r\n\r\n";
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  if (got.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "%s: %s\n", host.c_str(), got.substr(0, 300).c_str());
    std::exit(1);
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Summary {
  double p50, p99;
};
Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double p50 = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {p50, v[std::max<std::size_t>(1, n * 99 / 100) - 1]};
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 300;
  // The upstream: 200 "ok" to anything, one connection at a time.
  std::uint16_t up_port = 0;
  const int up_fd = listenLoopback(up_port);
  std::atomic<bool> stop{false};
  std::thread upstream([&] {
    while (!stop) {
      int c = ::accept4(up_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string got;
      if (readHead(c, got)) {
        static const std::string resp =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      }
      ::close(c);
    }
  });

  const std::string yaml =
      "apiVersion: sluice/v1\nkind: Workflow\nname: bench-approval\negress:\n"
      "  limits: {max_connections: 64, max_requests: 1000000}\n  rules:\n"
      "    - {id: open, action: allow, hosts: [open.test], ports: [\"1-65535\"],"
      " allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
      "    - {id: gate, action: ask, hosts: [gate.test], ports: [\"1-65535\"],"
      " allow_private: true, cidrs: [\"127.0.0.0/8\"], ask: {timeout: 10s}}\n";
  auto w = policy::parseWorkflow(yaml, "bench.yaml");
  if (!w) {
    std::fprintf(stderr, "%s", w.error().str().c_str());
    return 1;
  }
  auto workflow = std::make_shared<const policy::Workflow>(std::move(*w));
  auto desk = std::make_shared<proxy::ApprovalDesk>(nullptr);
  // The approver: a thread that answers each approval as soon as it is told of it.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> todo;
  bool done = false;
  std::thread approver([&] {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return done || !todo.empty(); });
      if (done) return;
      std::string id = std::move(todo.front());
      todo.pop_front();
      lock.unlock();
      desk->answer(id, true, proxy::Scope::kOnce, "bench");
      lock.lock();
    }
  });
  const auto handle = desk->watch("", [&](const proxy::Approval& a) {
    {
      std::lock_guard lock(mu);
      todo.push_back(a.id);
    }
    cv.notify_one();
  });

  auto resolver = std::make_shared<proxy::StaticResolver>();
  for (const char* h : {"open.test", "gate.test"})
    resolver->add(h, {*policy::parseIpLiteral("127.0.0.1")});
  proxy::ProxyOptions o;
  o.threads = 2;
  auto px = proxy::Proxy::create(std::move(o), nullptr, resolver);
  if (!px) {
    std::fprintf(stderr, "%s\n", px.error().message.c_str());
    return 1;
  }
  proxy::ListenerIdentity id;
  id.execution_id = "ex-bench";
  id.matcher = policy::Matcher::compile(workflow);
  id.secrets = policy::makeSecretStore({});
  id.approvals = desk;
  auto port = (*px)->listen("127.0.0.1", 0, std::move(id));
  if (!port) {
    std::fprintf(stderr, "%s\n", port.error().message.c_str());
    return 1;
  }
  (*px)->start();

  for (int i = 0; i < 20; ++i) {
    oneGet(*port, "open.test", up_port);
    oneGet(*port, "gate.test", up_port);
  }
  std::vector<double> allow, ask;
  for (int i = 0; i < n; ++i) {
    allow.push_back(oneGet(*port, "open.test", up_port));
    ask.push_back(oneGet(*port, "gate.test", up_port));
  }
  const Summary a = summarize(allow), k = summarize(ask);
  std::printf("in-process proxy, %d fresh-connection plain-HTTP GETs each, alternating:\n", n);
  std::printf("  allow rule                                p50 %.3f ms  p99 %.3f ms\n", a.p50,
              a.p99);
  std::printf(
      "  ask rule, desk watcher answers at once    p50 %.3f ms  p99 %.3f ms  (+%.3f ms at the "
      "median)\n",
      k.p50, k.p99, k.p50 - a.p50);

  (*px)->stop();
  desk->unwatch(handle);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  approver.join();
  stop = true;
  ::shutdown(up_fd, SHUT_RDWR);
  ::close(up_fd);
  upstream.join();
  return 0;
}
