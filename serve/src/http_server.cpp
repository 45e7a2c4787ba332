// HttpServer (http_server.hpp).
#include "http_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "http_body.hpp"

namespace sluice::serve {
using detail::Deadline;
using detail::readBody;
using detail::refusal;

namespace {

constexpr std::size_t kMaxHeaderBytes = 16 * 1024;
// Bounds what one connection buffers before its body is planned: a header and a little more.
constexpr std::size_t kReadBufferBytes = 32 * 1024;
constexpr unsigned kConnectionRetryAfter = 1;
// How long, and how much, a refused authenticated caller's unread body is read and dropped.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr std::size_t kLingerBytes = 1 << 20;

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

// A whole answer: what Reply::send() writes, and DirectAnswer serializes.
http::response<http::string_body> wholeResponse(http::status status, unsigned version,
                                                bool keep_alive, const std::string& content_type,
                                                std::string body, unsigned retry_after) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::server, "sluice");
  res.set(http::field::content_type, content_type);
  if (retry_after > 0) res.set(http::field::retry_after, std::to_string(retry_after));
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// The Reply of one connection; `Stream` is a tcp or Unix stream socket.
template <typename Stream>
class StreamReply final : public Reply {
 public:
  StreamReply(Stream& s, unsigned version, bool keep_alive)
      : s_(s), version_(version), keep_alive_(keep_alive) {}

  net::awaitable<bool> send(http::status status, std::string content_type,
                            std::string body) override {
    auto res = wholeResponse(status, version_, keep_alive_, content_type, std::move(body),
                             std::exchange(retry_after_, 0));
    ErrorCode ec;
    co_await http::async_write(s_, res, net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  std::unique_ptr<DirectAnswer> direct() override {
    const int fd = ::fcntl(s_.native_handle(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    return std::make_unique<DirectAnswer>(fd, version_, keep_alive_);
  }

  net::awaitable<bool> sendRest(const DirectAnswer& answer) override {
    const std::string_view rest = answer.rest();
    ErrorCode ec;
    co_await net::async_write(s_, net::buffer(rest.data(), rest.size()),
                              net::redirect_error(net::use_awaitable, ec));
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

DirectAnswer::DirectAnswer(int socket, unsigned version, bool keep_alive)
    : fd_(socket), version_(version), keep_alive_(keep_alive) {}

DirectAnswer::~DirectAnswer() {
  if (fd_ >= 0) ::close(fd_);
}

bool DirectAnswer::write(http::status status, const std::string& content_type, std::string body) {
  written_ = true;
  auto res = wholeResponse(status, version_, keep_alive_, content_type, std::move(body), 0);
  http::response_serializer<http::string_body> sr{res};
  ErrorCode ec;
  while (!ec && !sr.is_done())
    sr.next(ec, [&](ErrorCode&, const auto& buffers) {
      for (const auto b : beast::buffers_range_ref(buffers))
        wire_.append(static_cast<const char*>(b.data()), b.size());
      sr.consume(beast::buffer_bytes(buffers));
    });
  // Non-blocking: a client that reads slowly gets the rest from the strand.
  while (sent_ < wire_.size()) {
    const ssize_t n =
        ::send(fd_, wire_.data() + sent_, wire_.size() - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent_ += static_cast<std::size_t>(n);
  }
  return sent_ == wire_.size();
}

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
  std::size_t connections = 0;                  // guarded by mu
  std::map<std::string, std::size_t> per_peer;  // guarded by mu

  void refused(const std::string& reason) {
    if (options.refused) options.refused(reason);
  }
};

namespace {

using StatePtr = std::shared_ptr<HttpServer::State>;

// One admitted connection: counted in the totals until it ends.
class ConnectionSlot {
 public:
  ConnectionSlot(StatePtr st, std::string peer) : st_(std::move(st)), peer_(std::move(peer)) {}
  ConnectionSlot(ConnectionSlot&& o) noexcept = default;
  ConnectionSlot& operator=(ConnectionSlot&&) = delete;
  ~ConnectionSlot() {
    if (!st_) return;
    std::lock_guard lock(st_->mu);
    --st_->connections;
    if (auto it = st_->per_peer.find(peer_); it != st_->per_peer.end() && --it->second == 0)
      st_->per_peer.erase(it);
  }

 private:
  StatePtr st_;
  std::string peer_;
};

// A slot for a new connection from `peer`, or why not (the caps of HttpServerOptions).
std::expected<ConnectionSlot, Refusal> admitConnection(const StatePtr& st,
                                                       const std::string& peer) {
  const HttpServerOptions& o = st->options;
  std::lock_guard lock(st->mu);
  if (st->connections >= o.max_connections)
    return std::unexpected(refusal(503, "too_many_connections",
                                   "the daemon holds " + std::to_string(o.max_connections) +
                                       " connections already (--max-connections)",
                                   kConnectionRetryAfter));
  std::size_t& n = st->per_peer[peer];
  if (n >= o.max_connections_per_peer)
    return std::unexpected(refusal(
        429, "too_many_connections_from_peer",
        peer + " holds " + std::to_string(n) + " connections already (--max-connections-per-peer)",
        kConnectionRetryAfter));
  ++n;
  ++st->connections;
  return ConnectionSlot(st, peer);
}

// The whole answer to a connection refused at accept, written without waiting (the send buffer
// of a new socket is empty): a refusal costs no coroutine and no buffer.
template <typename Socket>
void refuseConnection(const StatePtr& st, Socket& s, const Refusal& r) {
  st->refused(r.reason);
  const std::string body = st->errors(r.status, r.reason, r.message);
  std::string text = "HTTP/1.1 " + std::to_string(r.status) + " " +
                     std::string(http::obsolete_reason(static_cast<http::status>(r.status))) +
                     "\r\nServer: sluice\r\nContent-Type: application/json\r\nRetry-After: " +
                     std::to_string(r.retry_after) +
                     "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body;
  (void)!::send(s.native_handle(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ErrorCode ignored;
  s.shutdown(Socket::shutdown_send, ignored);
  s.close(ignored);
}

// The caller of a Unix-socket connection: its peer's uid.
std::optional<Caller> unixCaller(unix_stream::socket& s, const HttpServerOptions& o, uid_t* uid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return std::nullopt;
  *uid = cred.uid;
  Caller c;
  c.name = "uid:" + std::to_string(cred.uid);
  c.approver = cred.uid == 0 || std::find(o.approver_uids.begin(), o.approver_uids.end(),
                                          cred.uid) != o.approver_uids.end();
  return c;
}

// Who is calling, from the header alone: a Unix peer is known since accept; a TCP client by
// its bearer token.
std::expected<Caller, std::string> authenticate(const StatePtr& st,
                                                const std::optional<Caller>& peer,
                                                const http::request_header<>& h) {
  if (peer) return *peer;
  const auto auth = h[http::field::authorization];
  return callerForBearer(st->options.tokens, std::string_view(auth.data(), auth.size()));
}

Request requestHead(const http::request_header<>& h) {
  Request req;
  req.method = h.method();
  req.method_text = std::string(h.method_string());
  req.target = std::string(h.target());
  req.content_type = std::string(h[http::field::content_type]);
  req.accept = std::string(h[http::field::accept]);
  return req;
}

// Reads and drops what a refused client still sends, for a moment and up to a bound, before
// the connection closes: closing a TCP socket with unread data resets the connection, and the
// client could lose the answer it has not read yet (RFC 9112 9.6: close in stages).
template <typename Stream>
net::awaitable<void> linger(Stream& s, Deadline<Stream>& deadline) {
  std::array<char, 4096> sink;
  std::size_t dropped = 0;
  ErrorCode ec;
  deadline.arm(kLingerTime);
  while (dropped < kLingerBytes && !ec)
    dropped +=
        co_await s.async_read_some(net::buffer(sink), net::redirect_error(net::use_awaitable, ec));
  deadline.disarm();
}

// Answers `r`; the connection then closes (its body, if any, unread; an authenticated caller's
// lingered over when `deadline` is given), unless `keep_version` names the HTTP version of a
// request whose connection stays open.
template <typename Stream>
net::awaitable<void> refuseRequest(const StatePtr& st, Stream& s, const Refusal& r,
                                   unsigned keep_version = 0,
                                   Deadline<Stream>* deadline = nullptr) {
  st->refused(r.reason);
  StreamReply<Stream> reply(s, keep_version != 0 ? keep_version : 11, keep_version != 0);
  reply.retryAfter(r.retry_after);
  co_await reply.send(static_cast<http::status>(r.status), "application/json",
                      st->errors(r.status, r.reason, r.message));
  if (keep_version != 0) co_return;
  ErrorCode ignored;
  s.shutdown(Stream::shutdown_send, ignored);
  if (deadline) co_await linger(s, *deadline);
}

// A request read whole, with what its answer needs of its head.
struct Incoming {
  Request req;
  unsigned version = 11;
  bool keep_alive = false;
};

// Reads one request's header, authenticates it and reads its body as planned. The request, or
// nothing when the connection is done (closed, refused, or a refusal already answered). With
// `*keep`, a refusal that left nothing unread keeps the connection.
template <typename Stream>
net::awaitable<std::optional<Incoming>> readRequest(const StatePtr& st, Stream& s,
                                                    beast::flat_buffer& buf,
                                                    const std::optional<Caller>& peer,
                                                    Deadline<Stream>& deadline, bool& keep) {
  http::request_parser<http::empty_body> head;
  head.header_limit(kMaxHeaderBytes);
  // The plan's limit applies, once the caller is known. Not boost::none: Beast 1.74 compares
  // a Content-Length with the empty optional as larger, and refuses every body.
  head.body_limit(std::numeric_limits<std::uint64_t>::max());
  ErrorCode ec;
  deadline.arm(st->options.header_timeout);
  co_await http::async_read_header(s, buf, head, net::redirect_error(net::use_awaitable, ec));
  deadline.disarm();
  keep = false;
  if (deadline.fired() || ec == http::error::end_of_stream || ec == net::error::eof || !s.is_open())
    co_return std::nullopt;
  // A socket error (the client reset the connection) leaves no one to answer.
  if (ec && ec.category() != http::make_error_code(http::error::bad_target).category())
    co_return std::nullopt;
  if (ec) {
    co_await refuseRequest(st, s,
                           refusal(400, "bad_request", "malformed HTTP request: " + ec.message()));
    co_return std::nullopt;
  }
  const unsigned version = head.get().version();
  const bool keep_alive = head.get().keep_alive();
  Request req = requestHead(head.get());
  auto caller = authenticate(st, peer, head.get());
  if (!caller) {
    co_await refuseRequest(st, s, refusal(401, "unauthorized", caller.error()));
    co_return std::nullopt;
  }
  req.caller = std::move(*caller);
  const bool has_body = !head.is_done();
  BodyPlan plan = st->options.plan ? st->options.plan(req)
                                   : BodyPlan{st->options.max_body_bytes, false, {}, {}};
  const auto announced = head.content_length();
  if (!plan.refuse && announced && *announced > plan.limit)
    plan.refuse = refusal(413, "payload_too_large",
                          "request body of " + std::to_string(*announced) + " bytes exceeds " +
                              std::to_string(plan.limit) + " bytes");
  if (plan.refuse) {
    // With nothing left unread the connection stays usable; else it closes, its body unread.
    keep = !has_body && keep_alive;
    co_await refuseRequest(st, s, *plan.refuse, keep ? version : 0, &deadline);
    co_return std::nullopt;
  }
  if (has_body) {
    if (beast::iequals(head.get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await net::async_write(s, net::buffer(kContinue.data(), kContinue.size()),
                                net::redirect_error(net::use_awaitable, ec));
    }
    auto refused = co_await readBody(st->options, s, buf, head, plan, req, deadline);
    if (refused) {
      if (refused->status != 0) co_await refuseRequest(st, s, *refused, 0, &deadline);
      co_return std::nullopt;
    }
  }
  req.ticket = std::move(plan.ticket);
  Incoming in{std::move(req), version, keep_alive};
  co_return in;
}

// `slot` counts the connection against the caps until it ends.
template <typename Stream>
net::awaitable<void> serveConnection(StatePtr st, Stream s, std::optional<Caller> peer,
                                     [[maybe_unused]] ConnectionSlot slot) {
  beast::flat_buffer buf(kReadBufferBytes);
  Deadline<Stream> deadline(s);
  for (;;) {
    bool keep = false;
    auto req = co_await readRequest(st, s, buf, peer, deadline, keep);
    if (!req) {
      if (keep) continue;
      co_return;
    }
    StreamReply<Stream> reply(s, req->version, req->keep_alive);
    co_await st->handler(req->req, reply);
    if (!req->keep_alive) {
      ErrorCode ignored;
      s.shutdown(Stream::shutdown_send, ignored);
      co_return;
    }
  }
}

// The peer of a new connection: its key for the per-peer cap, and for a Unix one its caller
// (SO_PEERCRED, before anything is read); a TCP client's caller comes with each request.
struct Peer {
  std::string key;
  std::optional<Caller> caller;
};
std::optional<Peer> peerOf(tcp::socket& s, const HttpServerOptions&) {
  ErrorCode ec;
  s.set_option(tcp::no_delay(true), ec);
  auto remote = s.remote_endpoint(ec);
  if (ec) return std::nullopt;
  return Peer{remote.address().to_string(), std::nullopt};
}
std::optional<Peer> peerOf(unix_stream::socket& s, const HttpServerOptions& o) {
  uid_t uid = 0;
  auto caller = unixCaller(s, o, &uid);
  if (!caller) return std::nullopt;  // no credentials: drop the connection
  return Peer{"uid:" + std::to_string(uid), std::move(caller)};
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
      // Out of descriptors (EMFILE, ENFILE) or memory: the pending connection stays queued, so
      // retrying at once would spin; give running connections a moment to end.
      net::steady_timer pause(acc->get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    auto peer = peerOf(s, st->options);
    if (!peer) continue;
    auto slot = admitConnection(st, peer->key);
    if (!slot) {
      refuseConnection(st, s, slot.error());
      continue;
    }
    auto ex = s.get_executor();
    net::co_spawn(
        ex, serveConnection<Socket>(st, std::move(s), std::move(peer->caller), std::move(*slot)),
        net::detached);
  }
}

}  // namespace

HttpServer::HttpServer(net::io_context& ioc, HttpServerOptions options, Handler handler,
                       ErrorWriter errors)
    : state_(std::make_shared<State>(ioc, std::move(options), std::move(handler),
                                     std::move(errors))) {}

HttpServer::~HttpServer() { close(); }

namespace {

// A bound, listening Unix acceptor starts accepting; `path` is removed at close (empty: not).
void serveUnix(const std::shared_ptr<HttpServer::State>& state,
               const std::shared_ptr<unix_stream::acceptor>& acc, const std::string& path) {
  {
    std::lock_guard lock(state->mu);
    state->unix_acceptors.push_back(acc);
    if (!path.empty()) state->unix_paths.push_back(path);
  }
  net::co_spawn(acc->get_executor(), acceptLoop<unix_stream>(state, acc), net::detached);
}

// A bound, listening TCP acceptor starts accepting; returns its HOST:PORT.
std::string serveTcp(const std::shared_ptr<HttpServer::State>& state,
                     const std::shared_ptr<tcp::acceptor>& acc) {
  ErrorCode ec;
  auto bound = acc->local_endpoint(ec);
  {
    std::lock_guard lock(state->mu);
    state->tcp_acceptors.push_back(acc);
  }
  net::co_spawn(acc->get_executor(), acceptLoop<tcp>(state, acc), net::detached);
  std::string h = bound.address().to_string();
  if (bound.address().is_v6()) h = "[" + h + "]";
  return h + ":" + std::to_string(bound.port());
}

}  // namespace

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
    // Bound and listening under a temporary name, then renamed into place: the path appears
    // only once a client can connect (a client that waits for it never gets ECONNREFUSED).
    std::string bound = path + ".~" + std::to_string(::getpid());
    if (bound.size() >= sizeof(sockaddr_un::sun_path)) bound = path;  // no room: bind in place
    // Created owner and group only (0660): the umask decides nothing here.
    const mode_t old = ::umask(0117);
    if (!ec) acc->bind(unix_stream::endpoint(bound), ec);
    ::umask(old);
    if (!ec) ::chmod(bound.c_str(), 0660);
    if (!ec) acc->listen(net::socket_base::max_listen_connections, ec);
    if (!ec && bound != path && ::rename(bound.c_str(), path.c_str()) != 0)
      ec = ErrorCode(errno, boost::system::system_category());
    if (ec) {
      if (bound != path) ::unlink(bound.c_str());
      return std::unexpected("--listen " + spec + ": " + ec.message());
    }
    serveUnix(state_, acc, path);
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
  return serveTcp(state_, acc);
}

std::expected<std::string, std::string> HttpServer::adopt(int fd) {
  const std::string what = "socket from systemd (fd " + std::to_string(fd) + ")";
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  int listening = 0, type = 0;
  socklen_t int_length = sizeof(int);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &int_length) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &int_length) != 0 || listening == 0 ||
      type != SOCK_STREAM)
    return std::unexpected(what + ": not a listening stream socket (ListenStream= in the unit)");
  ErrorCode ec;
  if (address.ss_family == AF_UNIX) {
    auto acc = std::make_shared<unix_stream::acceptor>(net::make_strand(state_->ioc));
    acc->assign(unix_stream(), fd, ec);
    const std::string path = ec ? std::string() : acc->local_endpoint(ec).path();
    if (ec) return std::unexpected(what + ": " + ec.message());
    // Its file, owner and mode are the .socket unit's (SocketGroup=, SocketMode=): left alone
    // here, and not removed at close, since systemd keeps listening across restarts.
    serveUnix(state_, acc, "");
    return "unix:" + path + " (from systemd)";
  }
  if (address.ss_family != AF_INET && address.ss_family != AF_INET6)
    return std::unexpected(what + ": neither a Unix nor a TCP socket");
  // The rule of --listen holds for a socket systemd made too: TCP callers need a token.
  if (state_->options.tokens.empty())
    return std::unexpected(what + ": a TCP listener needs --token-file");
  auto acc = std::make_shared<tcp::acceptor>(net::make_strand(state_->ioc));
  acc->assign(address.ss_family == AF_INET ? tcp::v4() : tcp::v6(), fd, ec);
  if (ec) return std::unexpected(what + ": " + ec.message());
  return serveTcp(state_, acc) + " (from systemd)";
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
