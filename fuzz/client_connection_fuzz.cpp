// libFuzzer target: arbitrary client bytes through the real proxy client-connection code
// (ClientConnection) (the one exchange pipeline: plain HTTP, pipelined requests, CONNECT with plain
// HTTP inside the tunnel), against a recording upstream on loopback. Properties, beyond "no crash"
// (ASan, UBSan): the upstream never receives a request the policy forbids (a path under /v1/admin
// or outside /v1, or a method other than GET/POST), nor a request target that is not in
// canonical form; and every exchange ends (the client connection closes after the client's EOF).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/request.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/proxy/resolver.hpp"

namespace {

namespace pol = sluice::policy;
namespace px = sluice::proxy;

[[noreturn]] void violated(const char* what, std::string_view detail) {
  std::fprintf(stderr, "PROPERTY VIOLATED: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

int listenLoopback(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0)
    std::abort();
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

void setTimeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Checks every request line that reaches the upstream.
void checkRequestLine(std::string_view line) {
  auto sp1 = line.find(' ');
  auto sp2 = line.find(' ', sp1 == std::string_view::npos ? 0 : sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) return;  // body bytes
  auto method = line.substr(0, sp1);
  auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target.front() != '/') return;  // not a request line (body bytes)
  if (line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) return;
  if (method != "GET" && method != "POST") violated("forbidden method reached upstream", line);
  auto canon = pol::canonicalRequest(method, target);
  if (!canon || canon->target() != target) violated("non-canonical target upstream", line);
  if (canon->path.rfind("/v1/", 0) != 0 || canon->path.rfind("/v1/admin/", 0) == 0)
    violated("forbidden path reached upstream", line);
}

// A recording upstream: answers every request head with a small response.
void serveUpstream(int lfd) {
  for (;;) {
    int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::thread([c] {
      setTimeout(c, 2000);
      std::string buf;
      char tmp[4096];
      for (;;) {
        ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) break;
        buf.append(tmp, static_cast<std::size_t>(n));
        std::size_t pos;
        while ((pos = buf.find("\r\n")) != std::string::npos) {
          std::string line = buf.substr(0, pos);
          buf.erase(0, pos + 2);
          checkRequestLine(line);
          if (line.empty()) {
            static const char kResp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            ::send(c, kResp, sizeof kResp - 1, MSG_NOSIGNAL);
          }
        }
      }
      ::close(c);
    }).detach();
  }
}

struct World {
  std::unique_ptr<px::Proxy> proxy;
  std::uint16_t port = 0;
  std::uint16_t upstream_port = 0;
};

World& world() {
  static World* w = [] {
    auto* w = new World;
    spdlog::set_level(spdlog::level::off);  // a log line per refused input would drown the run
    int ufd = listenLoopback(w->upstream_port);
    std::thread(serveUpstream, ufd).detach();
    std::string yaml =
        "apiVersion: sluice/v1\nkind: Workflow\nname: fuzz\negress:\n  rules:\n"
        "    - {id: api, action: allow, hosts: [up.test], ports: [\"1-65535\"],\n"
        "       allow_private: true, cidrs: [\"127.0.0.0/8\"], paths: [\"/v1/*\"],\n"
        "       methods: [GET, POST]}\n"
        "    - {id: no-admin, action: deny, hosts: [up.test], ports: [\"1-65535\"],\n"
        "       paths: [\"/v1/admin/*\"]}\n";
    auto wf = pol::parseWorkflow(yaml, "fuzz.yaml");
    if (!wf) std::abort();
    auto m = pol::Matcher::compile(std::make_shared<const pol::Workflow>(std::move(*wf)));
    auto resolver = std::make_shared<px::StaticResolver>();
    resolver->add("up.test", {*pol::parseIpLiteral("127.0.0.1")});
    px::ProxyOptions o;
    o.threads = 1;
    o.header_timeout = std::chrono::milliseconds(300);
    o.upstream_timeout = std::chrono::milliseconds(500);
    o.connect_timeout = std::chrono::milliseconds(500);
    o.idle_timeout = std::chrono::milliseconds(500);
    o.max_header_bytes = 4096;
    o.max_body_bytes = 8192;
    auto p = px::Proxy::create(o, nullptr, resolver);
    if (!p) std::abort();
    w->proxy = std::move(*p);
    auto port = w->proxy->listen("127.0.0.1", 0, {"fuzz-exec", m});
    if (!port) std::abort();
    w->port = *port;
    w->proxy->start();
    return w;
  }();
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& w = world();
  // "@U" in the input stands for the upstream's authority, so the fuzzer can reach it.
  std::string in(reinterpret_cast<const char*>(data), size);
  const std::string authority = "up.test:" + std::to_string(w.upstream_port);
  for (std::size_t pos = in.find("@U"); pos != std::string::npos; pos = in.find("@U", pos)) {
    in.replace(pos, 2, authority);
    pos += authority.size();
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(w.port);
  // A million connections a run: close with RST (no TIME_WAIT) and, if loopback's ephemeral
  // ports run out anyway, wait for them rather than report the harness's failure as a crash.
  int fd = -1;
  for (int attempt = 0; attempt < 500; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    ::close(fd);
    fd = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (fd < 0) return 0;
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  setTimeout(fd, 3000);
  ::send(fd, in.data(), in.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  char buf[8192];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        violated("client connection did not end after EOF", in);
      break;
    }
  }
  ::close(fd);
  return 0;
}
