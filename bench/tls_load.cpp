// Load client for bench/tls_vs_passthrough.sh: HTTPS GETs through an HTTP proxy (CONNECT,
// then TLS inside the tunnel), or directly, from N threads for D seconds, either opening a new
// connection (CONNECT + handshake) for every request or reusing one per thread (keep-alive).
// Mode h2: one HTTP/2 connection per thread (ALPN h2, nghttp2's client session), --streams
// requests in flight on it at a time. Prints one JSON line: requests, errors, req/s,
// p50/p99/max latency in microseconds, and the client's own CPU over the run (user and system
// microseconds, all threads), so the benchmark can charge every process its CPU per request.
//
//   tls_load --target HOST:PORT [--proxy PORT] --ca FILE [--ca FILE]... [--mode new|reuse|h2]
//            [--threads N] [--duration SECONDS] [--path /p] [--streams N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string host;
  int port = 0;
  int proxy_port = 0;  // 0 = direct
  std::vector<std::string> cas;
  bool reuse = false;
  bool h2 = false;
  int streams = 10;  // h2: requests in flight per connection
  int threads = 1;
  double duration = 5;
  std::string path = "/";
};

class Conn {
 public:
  Conn(const Config& cfg, SSL_CTX* ctx) : cfg_(cfg) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};  // every read bounded
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(cfg.proxy_port ? cfg.proxy_port : cfg.port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return;
    if (cfg.proxy_port) {
      std::string authority = cfg.host + ":" + std::to_string(cfg.port);
      std::string req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
      if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
        return;
      // Read the reply head byte-wise-ish: stop at the blank line so no TLS byte is eaten.
      std::string head;
      char c;
      while (head.size() < 8192 && head.find("\r\n\r\n") == std::string::npos) {
        if (::recv(fd_, &c, 1, 0) != 1) return;
        head += c;
      }
      if (head.compare(0, 12, "HTTP/1.1 200") != 0 && head.compare(0, 12, "HTTP/1.0 200") != 0)
        return;
    }
    ssl_ = SSL_new(ctx);
    if (cfg.h2) SSL_set_alpn_protos(ssl_, reinterpret_cast<const unsigned char*>("\x02h2"), 3);
    SSL_set_tlsext_host_name(ssl_, cfg.host.c_str());
    SSL_set1_host(ssl_, cfg.host.c_str());
    SSL_set_fd(ssl_, fd_);
    ok_ = SSL_connect(ssl_) == 1;
  }
  ~Conn() {
    if (ssl_) {
      SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  SSL* ssl() const { return ssl_; }

  // One GET; true on a 200 with its whole body read.
  bool get() {
    std::string req = "GET " + cfg_.path + " HTTP/1.1\r\nHost: " + cfg_.host + ":" +
                      std::to_string(cfg_.port) + "\r\nUser-Agent: tls_load\r\n" +
                      (cfg_.reuse ? "" : "Connection: close\r\n") + "\r\n";
    if (SSL_write(ssl_, req.data(), static_cast<int>(req.size())) <= 0) return false;
    std::size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return false;
    }
    std::string head = buf_.substr(0, end + 4);
    buf_.erase(0, end + 4);
    bool ok = head.compare(9, 3, "200") == 0;
    std::size_t len = 0;
    bool chunked = false;
    for (std::size_t p = head.find("\r\n"); p != std::string::npos && p + 2 < head.size();) {
      std::size_t q = head.find("\r\n", p + 2);
      std::string line = head.substr(p + 2, q - p - 2);
      if (strncasecmp(line.c_str(), "content-length:", 15) == 0) len = std::stoul(line.substr(15));
      if (strncasecmp(line.c_str(), "transfer-encoding:", 18) == 0 &&
          line.find("chunked") != std::string::npos)
        chunked = true;
      p = q;
    }
    if (chunked) {
      while (buf_.find("0\r\n\r\n") == std::string::npos)  // last chunk (bench bodies are tiny)
        if (!fill()) return false;
      buf_.clear();
    } else {
      while (buf_.size() < len)
        if (!fill()) return false;
      buf_.erase(0, len);
    }
    return ok;
  }

 private:
  bool fill() {
    char tmp[16384];
    int n = SSL_read(ssl_, tmp, sizeof tmp);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  const Config& cfg_;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
  bool ok_ = false;
  std::string buf_;
};

// One HTTP/2 connection kept busy with cfg.streams GETs in flight until `until`.
struct H2Load {
  std::map<std::int32_t, Clock::time_point> started;
  std::map<std::int32_t, bool> ok;
  std::vector<double>* lat;
  std::atomic<long>* errors;

  static int onHeader(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                      std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                      std::uint8_t, void* user) {
    auto* self = static_cast<H2Load*>(user);
    if (std::string_view(reinterpret_cast<const char*>(name), namelen) == ":status")
      self->ok[f->hd.stream_id] =
          std::string_view(reinterpret_cast<const char*>(value), valuelen) == "200";
    return 0;
  }
  static int onClose(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
    auto* self = static_cast<H2Load*>(user);
    auto it = self->started.find(id);
    if (it == self->started.end()) return 0;
    if (code == 0 && self->ok[id])
      self->lat->push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - it->second).count());
    else
      self->errors->fetch_add(1);
    self->started.erase(it);
    self->ok.erase(id);
    return 0;
  }
};

bool h2Round(nghttp2_session* s, SSL* ssl) {  // send what is queued, then read once
  const std::uint8_t* data = nullptr;
  for (ssize_t n; (n = nghttp2_session_mem_send(s, &data)) > 0;)
    if (SSL_write(ssl, data, static_cast<int>(n)) <= 0) return false;
  char buf[16384];
  int n = SSL_read(ssl, buf, sizeof buf);
  return n > 0 && nghttp2_session_mem_recv(s, reinterpret_cast<std::uint8_t*>(buf),
                                           static_cast<std::size_t>(n)) == n;
}

void h2Worker(const Config& cfg, SSL_CTX* ctx, Clock::time_point until, std::vector<double>* lat,
              std::atomic<long>* errors) {
  while (Clock::now() < until) {
    Conn conn(cfg, ctx);
    if (!conn.ok()) {
      errors->fetch_add(1);
      continue;
    }
    H2Load load{{}, {}, lat, errors};
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, H2Load::onHeader);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, H2Load::onClose);
    nghttp2_session* s = nullptr;
    nghttp2_session_client_new(&s, cbs, &load);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, nullptr, 0);
    const std::string authority = cfg.host + ":" + std::to_string(cfg.port);
    auto nv = [](const char* n, const std::string& v) {
      return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n)),
                        reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())),
                        std::strlen(n), v.size(), NGHTTP2_NV_FLAG_NONE};
    };
    const std::string get = "GET", https = "https";
    nghttp2_nv hdrs[] = {nv(":method", get), nv(":scheme", https), nv(":authority", authority),
                         nv(":path", cfg.path)};
    bool alive = true;
    while (alive && Clock::now() < until) {
      while (static_cast<int>(load.started.size()) < cfg.streams) {
        auto id = nghttp2_submit_request(s, nullptr, hdrs, 4, nullptr, nullptr);
        if (id < 0) break;
        load.started[id] = Clock::now();
      }
      alive = h2Round(s, conn.ssl());
    }
    errors->fetch_add(static_cast<long>(load.started.size()) * (alive ? 0 : 1));
    nghttp2_session_del(s);
  }
}

void worker(const Config& cfg, SSL_CTX* ctx, Clock::time_point until, std::vector<double>* lat,
            std::atomic<long>* errors) {
  std::unique_ptr<Conn> conn;
  while (Clock::now() < until) {
    auto t0 = Clock::now();
    if (!conn || !cfg.reuse) conn = std::make_unique<Conn>(cfg, ctx);
    bool ok = conn->ok() && conn->get();
    auto t1 = Clock::now();
    if (!ok) {
      errors->fetch_add(1);
      conn.reset();
      continue;
    }
    lat->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (!cfg.reuse) conn.reset();
  }
}

// This process's CPU so far, all threads: {user, system} in microseconds.
std::pair<long long, long long> cpuMicros() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& tv) { return tv.tv_sec * 1000000LL + tv.tv_usec; };
  return {us(ru.ru_utime), us(ru.ru_stime)};
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that closes a kept-alive connection (Squid does, under load) makes the next
  // SSL_write fail with EPIPE, which the worker counts as an error and reconnects after. Left
  // at its default, SIGPIPE killed the whole client silently instead, with no JSON printed.
  std::signal(SIGPIPE, SIG_IGN);
  Config cfg;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--target") {
      auto c = v.rfind(':');
      cfg.host = v.substr(0, c);
      cfg.port = std::atoi(v.c_str() + c + 1);
    } else if (k == "--proxy") {
      cfg.proxy_port = std::atoi(v.c_str());
    } else if (k == "--ca") {
      cfg.cas.push_back(v);
    } else if (k == "--mode") {
      cfg.reuse = v == "reuse";
      cfg.h2 = v == "h2";
    } else if (k == "--streams") {
      cfg.streams = std::max(1, std::atoi(v.c_str()));
    } else if (k == "--threads") {
      cfg.threads = std::max(1, std::atoi(v.c_str()));
    } else if (k == "--duration") {
      cfg.duration = std::atof(v.c_str());
    } else if (k == "--path") {
      cfg.path = v;
    } else {
      std::fprintf(stderr, "tls_load: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (cfg.host.empty() || cfg.cas.empty()) {
    std::fprintf(stderr, "usage: tls_load --target HOST:PORT [--proxy PORT] --ca FILE ...\n");
    return 2;
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  for (const auto& f : cfg.cas) {
    if (SSL_CTX_load_verify_locations(ctx, f.c_str(), nullptr) != 1) {
      std::fprintf(stderr, "tls_load: cannot load %s\n", f.c_str());
      return 2;
    }
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // No session resumption: a "new connection" is a full handshake, as a fresh process does.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);

  const auto cpu_start = cpuMicros();
  auto start = Clock::now();
  auto until = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(cfg.duration));
  std::vector<std::vector<double>> lats(static_cast<std::size_t>(cfg.threads));
  std::atomic<long> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < cfg.threads; ++t)
    threads.emplace_back(cfg.h2 ? h2Worker : worker, std::cref(cfg), ctx, until,
                         &lats[static_cast<std::size_t>(t)], &errors);
  for (auto& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const auto cpu_end = cpuMicros();
  std::vector<double> all;
  for (auto& l : lats) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0
                       : all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))];
  };
  std::printf(
      "{\"requests\":%zu,\"errors\":%ld,\"rps\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
      "\"max_us\":%.1f,\"cpu_user_us\":%lld,\"cpu_sys_us\":%lld}\n",
      all.size(), errors.load(), all.size() / elapsed, pct(0.50), pct(0.99),
      all.empty() ? 0.0 : all.back(), cpu_end.first - cpu_start.first,
      cpu_end.second - cpu_start.second);
  SSL_CTX_free(ctx);
  return all.empty() ? 1 : 0;
}
