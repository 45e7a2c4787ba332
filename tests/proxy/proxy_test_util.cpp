// Test harness implementation: upstream servers and the blocking client.
#include "proxy_test_util.hpp"

#include <poll.h>

#include <cstring>
#include <sstream>

namespace sluice::proxy::testing {

namespace {

using ErrorCode = boost::system::error_code;

// One HTTP connection of the upstream: serves requests until the client closes.
net::awaitable<void> serveHttp(tcp::socket sock, UpstreamLog* log) {
  beast::flat_buffer buf;
  bool drop_next = false;  // after /drop-next: read the next request, then close unanswered
  for (;;) {
    ErrorCode ec;
    http::request<http::string_body> req;
    co_await http::async_read(sock, buf, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    std::ostringstream head;
    head << req.method_string() << " " << req.target() << "\n";
    for (const auto& f : req) head << f.name_string() << ": " << f.value() << "\n";
    head << "body-bytes: " << req.body().size() << "\n";
    {
      std::lock_guard lock(log->mu);
      log->request_heads.push_back(head.str());
    }
    std::string target(req.target());
    if (drop_next) {
      // A kept-alive connection that went stale as the request arrived: the proxy's redial.
      sock.close(ec);
      co_return;
    }
    drop_next = target == "/drop-next";
    if (req.find("X-Test-Interim") != req.end()) {
      // An interim response before the answer (the matrix's "after a 1xx" path).
      static constexpr std::string_view kInterim =
          "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
      co_await net::async_write(sock, net::buffer(kInterim.data(), kInterim.size()),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
    }
    if (target == "/slow") {
      net::steady_timer t(sock.get_executor());
      t.expires_after(std::chrono::seconds(30));
      co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
      co_return;
    }
    if (target == "/reset") {
      std::string partial =
          "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + std::string(1000, 'r');
      co_await net::async_write(sock, net::buffer(partial),
                                net::redirect_error(net::use_awaitable, ec));
      // SO_LINGER 0 makes close() send RST instead of FIN.
      sock.set_option(net::socket_base::linger(true, 0), ec);
      sock.close(ec);
      co_return;
    }
    if (target == "/chunked") {
      std::string resp =
          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n "
          "world\r\n0\r\n\r\n";
      co_await net::async_write(sock, net::buffer(resp),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      continue;
    }
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "text/plain");
    res.set("Connection", "keep-alive, X-Upstream-Hop");
    res.set("X-Upstream-Hop", "1");
    res.set("Keep-Alive", "timeout=5");
    if (target.rfind("/big/", 0) == 0) {
      res.body() = std::string(std::stoul(target.substr(5)), 'x');
    } else {
      res.body() = head.str();
    }
    bool close = target == "/close" || !req.keep_alive();
    res.keep_alive(!close);
    if (req.method() == http::verb::head) {
      res.content_length(res.body().size());
      res.body().clear();
      http::response_serializer<http::string_body> sr{res};
      sr.split(true);
      co_await http::async_write_header(sock, sr, net::redirect_error(net::use_awaitable, ec));
    } else {
      res.prepare_payload();
      co_await http::async_write(sock, res, net::redirect_error(net::use_awaitable, ec));
    }
    if (ec || close) {
      sock.shutdown(tcp::socket::shutdown_send, ec);
      co_return;
    }
  }
}

net::awaitable<void> serveEcho(tcp::socket sock) {
  char data[4096];
  for (;;) {
    ErrorCode ec;
    auto n = co_await sock.async_read_some(net::buffer(data),
                                           net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::eof) {
      co_await net::async_write(sock, net::buffer("BYE", 3),
                                net::redirect_error(net::use_awaitable, ec));
      sock.shutdown(tcp::socket::shutdown_send, ec);
      // Keep the socket until the peer closes too.
      co_await sock.async_read_some(net::buffer(data), net::redirect_error(net::use_awaitable, ec));
      co_return;
    }
    if (ec) co_return;
    co_await net::async_write(sock, net::buffer(data, n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
  }
}

net::awaitable<void> serveReset(tcp::socket sock) {
  ErrorCode ec;
  co_await net::async_write(sock, net::buffer("partial", 7),
                            net::redirect_error(net::use_awaitable, ec));
  net::steady_timer t(sock.get_executor());
  t.expires_after(std::chrono::milliseconds(100));
  co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
  sock.set_option(net::socket_base::linger(true, 0), ec);
  sock.close(ec);
}

enum class Kind { kHttp, kEcho, kReset };

net::awaitable<void> acceptLoop(tcp::acceptor* acc, UpstreamLog* log, Kind kind) {
  for (;;) {
    ErrorCode ec;
    tcp::socket s = co_await acc->async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    if (log) log->accepted.fetch_add(1);
    auto ex = s.get_executor();
    switch (kind) {
      case Kind::kHttp:
        net::co_spawn(ex, serveHttp(std::move(s), log), net::detached);
        break;
      case Kind::kEcho:
        net::co_spawn(ex, serveEcho(std::move(s)), net::detached);
        break;
      case Kind::kReset:
        net::co_spawn(ex, serveReset(std::move(s)), net::detached);
        break;
    }
  }
}

// One connection of the RawUpstream: logs the bytes, answers every complete request head.
net::awaitable<void> serveRaw(tcp::socket sock, RawUpstream::Log* log) {
  std::string pending;
  char data[4096];
  for (;;) {
    ErrorCode ec;
    auto n = co_await sock.async_read_some(net::buffer(data),
                                           net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    pending.append(data, n);
    {
      std::lock_guard lock(log->mu);
      log->bytes.append(data, n);
    }
    for (auto end = pending.find("\r\n\r\n"); end != std::string::npos;
         end = pending.find("\r\n\r\n")) {
      std::string head = pending.substr(0, end + 4);
      pending.erase(0, end + 4);
      std::string line = head.substr(0, head.find("\r\n"));
      {
        std::lock_guard lock(log->mu);
        log->lines.push_back(line);
      }
      std::string lower = head;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string out;
      if (lower.find("\r\nx-test-interim:") != std::string::npos)
        out = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
      out += "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
             std::to_string(line.size()) + "\r\n\r\n" + line;
      co_await net::async_write(sock, net::buffer(out),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
    }
  }
}

net::awaitable<void> acceptRaw(tcp::acceptor* acc, RawUpstream::Log* log) {
  for (;;) {
    ErrorCode ec;
    tcp::socket s = co_await acc->async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    auto ex = s.get_executor();
    net::co_spawn(ex, serveRaw(std::move(s), log), net::detached);
  }
}

std::uint16_t openAcceptor(tcp::acceptor& acc) {
  tcp::endpoint ep(net::ip::make_address("127.0.0.1"), 0);
  acc.open(ep.protocol());
  acc.set_option(net::socket_base::reuse_address(true));
  acc.bind(ep);
  acc.listen(4096);
  return acc.local_endpoint().port();
}

}  // namespace

Upstreams::Upstreams() : http_acc_(ioc_), echo_acc_(ioc_), reset_acc_(ioc_) {
  http_port_ = openAcceptor(http_acc_);
  echo_port_ = openAcceptor(echo_acc_);
  reset_port_ = openAcceptor(reset_acc_);
  net::co_spawn(ioc_, acceptLoop(&http_acc_, &http_log_, Kind::kHttp), net::detached);
  net::co_spawn(ioc_, acceptLoop(&echo_acc_, &echo_log_, Kind::kEcho), net::detached);
  net::co_spawn(ioc_, acceptLoop(&reset_acc_, nullptr, Kind::kReset), net::detached);
  work_.emplace(net::make_work_guard(ioc_));
  threads_.emplace_back([this] { ioc_.run(); });
}

Upstreams::~Upstreams() {
  work_.reset();
  ioc_.stop();
  for (auto& t : threads_) t.join();
}

RawUpstream::RawUpstream() : acc_(ioc_) {
  port_ = openAcceptor(acc_);
  net::co_spawn(ioc_, acceptRaw(&acc_, &log_), net::detached);
  thread_ = std::thread([this] { ioc_.run(); });
}

RawUpstream::~RawUpstream() {
  ioc_.stop();
  thread_.join();
}

std::string RawUpstream::received() {
  std::lock_guard lock(log_.mu);
  return log_.bytes;
}

std::vector<std::string> RawUpstream::requestLines() {
  std::lock_guard lock(log_.mu);
  return log_.lines;
}

Client::Client(std::uint16_t port, std::chrono::milliseconds timeout, const char* source) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  if (source) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

bool Client::send(std::string_view bytes) {
  while (!bytes.empty()) {
    auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void Client::shutdownWrite() { ::shutdown(fd_, SHUT_WR); }

bool Client::fill() {
  char tmp[16384];
  auto n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n <= 0) return false;
  buf_.append(tmp, static_cast<std::size_t>(n));
  return true;
}

Response Client::readResponse(bool head_only) {
  Response r;
  std::size_t end;
  while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) {
      r.closed = true;
      return r;
    }
  }
  std::string head = buf_.substr(0, end);
  buf_.erase(0, end + 4);
  std::istringstream in(head);
  std::string line;
  std::getline(in, line);
  if (line.size() >= 12) r.status = std::atoi(line.substr(9, 3).c_str());
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[name] = value;
  }
  if (head_only || r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200))
    return r;
  if (r.headers.count("content-length")) {
    std::size_t len = std::stoul(r.headers["content-length"]);
    while (buf_.size() < len)
      if (!fill()) break;
    r.body = buf_.substr(0, std::min(len, buf_.size()));
    buf_.erase(0, r.body.size());
  } else if (r.headers["transfer-encoding"] == "chunked") {
    for (;;) {
      std::size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos)
        if (!fill()) return r;
      std::size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
      buf_.erase(0, eol + 2);
      while (buf_.size() < size + 2)
        if (!fill()) return r;
      r.body += buf_.substr(0, size);
      buf_.erase(0, size + 2);
      if (size == 0) break;
    }
  } else {
    while (fill()) {
    }
    r.body = buf_;
    buf_.clear();
    r.closed = true;
  }
  if (r.header("connection") == "close") r.closed = true;
  return r;
}

std::string Client::readN(std::size_t n) {
  while (buf_.size() < n)
    if (!fill()) break;
  auto out = buf_.substr(0, std::min(n, buf_.size()));
  buf_.erase(0, out.size());
  return out;
}

std::string Client::readAll() {
  while (fill()) {
  }
  auto out = buf_;
  buf_.clear();
  return out;
}

bool Client::waitClosed() {
  char tmp[4096];
  for (;;) {
    auto n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;  // timeout -> false
  }
}

std::string getRequest(const std::string& authority, const std::string& path,
                       const std::string& extra, const std::string& method) {
  return method + " http://" + authority + path + " HTTP/1.1\r\nHost: " + authority + "\r\n" +
         extra + "\r\n";
}

std::string connectRequest(const std::string& authority, const std::string& extra) {
  return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n" + extra + "\r\n";
}

}  // namespace sluice::proxy::testing
