// HttpServer (http_server.hpp).
#include "http_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <mutex>
#include <optional>

namespace sluice::serve {
namespace {

constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
constexpr auto kHeaderTimeout = std::chrono::seconds(30);

// Waits until the client's socket is readable; EOF or an error there (not a pipelined request)
// means the client went away.
template <typename Stream>
net::awaitable<void> watchPeer(Stream* s, std::shared_ptr<std::function<void()>> on_close) {
  ErrorCode ec;
  co_await s->async_wait(Stream::wait_read, net::redirect_error(net::use_awaitable, ec));
  if (ec == net::error::operation_aborted) co_return;
  char c;
  ssize_t n = ::recv(s->native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (ec || n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) (*on_close)();
}

// The Reply of one connection; `Stream` is a tcp or Unix stream socket.
template <typename Stream>
class StreamReply final : public Reply {
 public:
  StreamReply(Stream& s, unsigned version, bool keep_alive)
      : s_(s), version_(version), keep_alive_(keep_alive) {}

  net::awaitable<bool> send(http::status status, std::string content_type,
                            std::string body) override {
    http::response<http::string_body> res{status, version_};
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    ErrorCode ec;
    co_await http::async_write(s_, res, net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<bool> beginStream(http::status status, std::string content_type) override {
    http::response<http::empty_body> res{status, version_};
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    ErrorCode ec;
    co_await http::async_write_header(s_, sr, net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<bool> chunk(std::string data) override {
    ErrorCode ec;
    co_await net::async_write(s_, http::make_chunk(net::buffer(data)),
                              net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<bool> endStream() override {
    ErrorCode ec;
    co_await net::async_write(s_, http::make_chunk_last(),
                              net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::any_io_executor executor() override { return s_.get_executor(); }

  void watchClose(std::function<void()> on_close) override {
    watching_ = true;
    net::co_spawn(
        s_.get_executor(),
        watchPeer<Stream>(&s_, std::make_shared<std::function<void()>>(std::move(on_close))),
        net::detached);
  }
  void stopWatching() override {
    if (!watching_) return;
    watching_ = false;
    // Only the watcher's wait is pending now (the handler is not reading or writing).
    ErrorCode ec;
    s_.cancel(ec);
  }

 private:
  bool watching_ = false;
  Stream& s_;
  unsigned version_;
  bool keep_alive_;
};

}  // namespace

struct HttpServer::State {
  State(net::io_context& i, HttpServerOptions o, Handler h, ErrorWriter e)
      : ioc(i), options(std::move(o)), handler(std::move(h)), errors(std::move(e)) {}
  net::io_context& ioc;
  HttpServerOptions options;
  Handler handler;
  ErrorWriter errors;
  std::mutex mu;
  std::vector<std::shared_ptr<tcp::acceptor>> tcp_acceptors;
  std::vector<std::shared_ptr<unix_stream::acceptor>> unix_acceptors;
  std::vector<std::string> unix_paths;
  bool closed = false;
};

namespace {

using StatePtr = std::shared_ptr<HttpServer::State>;

// The caller of a Unix-socket connection: its peer's uid.
std::optional<Caller> unixCaller(unix_stream::socket& s, const HttpServerOptions& o) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return std::nullopt;
  Caller c;
  c.name = "uid:" + std::to_string(cred.uid);
  c.approver = cred.uid == 0 || std::find(o.approver_uids.begin(), o.approver_uids.end(),
                                          cred.uid) != o.approver_uids.end();
  return c;
}

template <typename Stream>
net::awaitable<void> serveConnection(StatePtr st, Stream s, std::optional<Caller> peer) {
  beast::flat_buffer buf;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(st->options.max_body_bytes);
    ErrorCode ec;
    net::steady_timer deadline(s.get_executor());
    deadline.expires_after(kHeaderTimeout);
    bool timed_out = false;
    deadline.async_wait([&](ErrorCode e) {
      if (e) return;
      timed_out = true;
      ErrorCode ignored;
      s.close(ignored);
    });
    co_await http::async_read(s, buf, parser, net::redirect_error(net::use_awaitable, ec));
    deadline.cancel();
    if (timed_out || ec == http::error::end_of_stream || ec == net::error::eof) co_return;
    auto& raw = parser.get();
    StreamReply<Stream> reply(s, raw.version(), raw.keep_alive());
    if (ec) {
      const bool too_big = ec == http::error::body_limit;
      std::string body = st->errors(
          too_big ? 413 : 400, too_big ? "payload_too_large" : "bad_request",
          too_big ? "request body exceeds " + std::to_string(st->options.max_body_bytes) + " bytes"
                  : "malformed HTTP request: " + ec.message());
      StreamReply<Stream> closing(s, 11, false);
      co_await closing.send(too_big ? http::status::payload_too_large : http::status::bad_request,
                            "application/json", std::move(body));
      co_return;
    }
    Request req;
    req.method = raw.method();
    req.method_text = std::string(raw.method_string());
    req.target = std::string(raw.target());
    req.content_type = std::string(raw[http::field::content_type]);
    req.accept = std::string(raw[http::field::accept]);
    req.body = std::move(raw.body());
    if (peer) {
      req.caller = *peer;
    } else {
      const auto auth = raw[http::field::authorization];
      auto caller = callerForBearer(st->options.tokens, std::string_view(auth.data(), auth.size()));
      if (!caller) {
        std::string body = st->errors(401, "unauthorized", caller.error());
        co_await reply.send(http::status::unauthorized, "application/json", std::move(body));
        if (!raw.keep_alive()) co_return;
        continue;
      }
      req.caller = *caller;
    }
    const bool keep = raw.keep_alive();
    co_await st->handler(req, reply);
    if (!keep) {
      ErrorCode ignored;
      s.shutdown(Stream::shutdown_send, ignored);
      co_return;
    }
  }
}

// Caller of a new connection: a Unix peer's uid now; a TCP client's token per request (nullopt).
std::optional<std::optional<Caller>> peerCaller(tcp::socket& s, const HttpServerOptions&) {
  ErrorCode ec;
  s.set_option(tcp::no_delay(true), ec);
  return std::optional<Caller>();
}
std::optional<std::optional<Caller>> peerCaller(unix_stream::socket& s,
                                                const HttpServerOptions& o) {
  auto caller = unixCaller(s, o);
  if (!caller) return std::nullopt;  // no credentials: drop the connection
  return caller;
}

template <typename Protocol>
net::awaitable<void> acceptLoop(StatePtr st, std::shared_ptr<typename Protocol::acceptor> acc) {
  using Socket = typename Protocol::socket;
  for (;;) {
    ErrorCode ec;
    Socket s(net::make_strand(st->ioc));
    co_await acc->async_accept(s, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (!acc->is_open()) co_return;
      continue;
    }
    auto caller = peerCaller(s, st->options);
    if (!caller) continue;
    auto ex = s.get_executor();
    net::co_spawn(ex, serveConnection<Socket>(st, std::move(s), std::move(*caller)), net::detached);
  }
}

}  // namespace

HttpServer::HttpServer(net::io_context& ioc, HttpServerOptions options, Handler handler,
                       ErrorWriter errors)
    : state_(std::make_shared<State>(ioc, std::move(options), std::move(handler),
                                     std::move(errors))) {}

HttpServer::~HttpServer() { close(); }

std::expected<std::string, std::string> HttpServer::listen(const std::string& spec) {
  ErrorCode ec;
  if (spec.starts_with("unix:")) {
    std::string path = spec.substr(5);
    if (path.empty() || path[0] != '/')
      return std::unexpected("--listen " + spec + ": the socket path must be absolute");
    std::filesystem::path p(path);
    std::error_code fec;
    std::filesystem::create_directories(p.parent_path(), fec);
    // A socket left by a daemon that died is replaced; anything else at the path is not.
    struct stat sb {};
    if (::lstat(path.c_str(), &sb) == 0) {
      if (!S_ISSOCK(sb.st_mode))
        return std::unexpected("--listen " + spec + ": exists and is not a socket");
      ::unlink(path.c_str());
    }
    auto acc = std::make_shared<unix_stream::acceptor>(net::make_strand(state_->ioc));
    acc->open(unix_stream(), ec);
    // Created owner and group only (0660): the umask decides nothing here.
    const mode_t old = ::umask(0117);
    if (!ec) acc->bind(unix_stream::endpoint(path), ec);
    ::umask(old);
    if (!ec) ::chmod(path.c_str(), 0660);
    if (!ec) acc->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return std::unexpected("--listen " + spec + ": " + ec.message());
    {
      std::lock_guard lock(state_->mu);
      state_->unix_acceptors.push_back(acc);
      state_->unix_paths.push_back(path);
    }
    net::co_spawn(acc->get_executor(), acceptLoop<unix_stream>(state_, acc), net::detached);
    return "unix:" + path;
  }
  auto colon = spec.rfind(':');
  if (colon == std::string::npos)
    return std::unexpected("--listen " + spec + ": expected unix:PATH or HOST:PORT");
  std::string host = spec.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned long port = 0;
  try {
    port = std::stoul(spec.substr(colon + 1));
  } catch (...) {
    return std::unexpected("--listen " + spec + ": bad port");
  }
  if (port > 65535) return std::unexpected("--listen " + spec + ": bad port");
  if (state_->options.tokens.empty())
    return std::unexpected("--listen " + spec +
                           ": a TCP listener needs --token-file (callers authenticate with a "
                           "bearer token); use unix:PATH otherwise");
  auto addr = net::ip::make_address(host, ec);
  if (ec) return std::unexpected("--listen " + spec + ": '" + host + "' is not an IP address");
  auto acc = std::make_shared<tcp::acceptor>(net::make_strand(state_->ioc));
  tcp::endpoint ep(addr, static_cast<std::uint16_t>(port));
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(net::socket_base::max_listen_connections, ec);
  if (ec) return std::unexpected("--listen " + spec + ": " + ec.message());
  auto bound = acc->local_endpoint(ec);
  {
    std::lock_guard lock(state_->mu);
    state_->tcp_acceptors.push_back(acc);
  }
  net::co_spawn(acc->get_executor(), acceptLoop<tcp>(state_, acc), net::detached);
  std::string h = bound.address().to_string();
  if (bound.address().is_v6()) h = "[" + h + "]";
  return h + ":" + std::to_string(bound.port());
}

void HttpServer::close() {
  std::lock_guard lock(state_->mu);
  if (state_->closed) return;
  state_->closed = true;
  for (auto& a : state_->tcp_acceptors) {
    auto acc = a;
    net::post(acc->get_executor(), [acc] {
      ErrorCode ec;
      acc->close(ec);
    });
  }
  for (auto& a : state_->unix_acceptors) {
    auto acc = a;
    net::post(acc->get_executor(), [acc] {
      ErrorCode ec;
      acc->close(ec);
    });
  }
  for (const auto& p : state_->unix_paths) ::unlink(p.c_str());
}

}  // namespace sluice::serve
