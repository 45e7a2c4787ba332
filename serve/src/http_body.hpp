// Reading a request's body for HttpServer (http_server.hpp): a deadline on a connection's
// reads, and the body read in chunks, into memory or spooled to an unlinked file, up to the
// limit its plan gives.
#pragma once

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http_server.hpp"

namespace sluice::serve::detail {

constexpr std::size_t kBodyChunkBytes = 64 * 1024;

Refusal refusal(int status, const char* reason, std::string message, unsigned retry_after = 0);
/// An unlinked file in `dir` (empty: the system's temp directory), or null (errno says why).
std::shared_ptr<SpooledBody> openSpool(const std::string& dir);
bool writeAll(int fd, const char* p, std::size_t n);

// A deadline on a connection's reads: when it fires the socket is closed, so the pending read
// fails. What the timer's handler touches is shared, so a handler already queued when the
// deadline is moved, disarmed or destroyed does nothing.
template <typename Stream>
class Deadline {
 public:
  explicit Deadline(Stream& s) : shared_(std::make_shared<Shared>(&s)), timer_(s.get_executor()) {}
  ~Deadline() { shared_->stream = nullptr; }
  void arm(std::chrono::milliseconds d) {
    const unsigned gen = ++shared_->gen;
    timer_.expires_after(d);
    timer_.async_wait([sh = shared_, gen](ErrorCode e) {
      if (e || sh->gen != gen || !sh->stream) return;
      sh->fired = true;
      ErrorCode ignored;
      sh->stream->close(ignored);
    });
  }
  void disarm() {
    ++shared_->gen;
    timer_.cancel();
  }
  bool fired() const { return shared_->fired; }

 private:
  struct Shared {
    explicit Shared(Stream* s) : stream(s) {}
    Stream* stream;
    unsigned gen = 0;
    bool fired = false;
  };
  std::shared_ptr<Shared> shared_;
  net::steady_timer timer_;
};

// Reads the body `head` announced, as `plan` says, into `req` (memory, or a spooled file).
// Nothing when it is all in; else the refusal to answer (status 0: the client was too slow and
// its socket is closed, there is no one to answer).
template <typename Stream>
net::awaitable<std::optional<Refusal>> readBody(const HttpServerOptions& o, Stream& s,
                                                beast::flat_buffer& buf,
                                                http::request_parser<http::empty_body>& head,
                                                const BodyPlan& plan, Request& req,
                                                Deadline<Stream>& deadline) {
  http::request_parser<http::buffer_body> p(std::move(head));
  p.body_limit(plan.limit);  // a chunked body is counted as it arrives
  std::shared_ptr<SpooledBody> spool;
  if (plan.spool && !(spool = openSpool(o.spool_dir)))
    co_return refusal(500, "internal",
                      "cannot spool the request body: " + std::string(std::strerror(errno)));
  std::vector<char> chunk(kBodyChunkBytes);  // only while a body is read
  while (!p.is_done()) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    ErrorCode ec;
    deadline.arm(o.body_idle_timeout);
    co_await http::async_read(s, buf, p, net::redirect_error(net::use_awaitable, ec));
    deadline.disarm();
    if (ec == http::error::need_buffer) ec = {};
    if (deadline.fired()) co_return refusal(0, "timeout", "");
    if (ec == http::error::body_limit)
      co_return refusal(413, "payload_too_large",
                        "request body exceeds " + std::to_string(plan.limit) + " bytes");
    if (ec) co_return refusal(400, "bad_request", "malformed HTTP request body: " + ec.message());
    const std::size_t n = chunk.size() - p.get().body().size;
    if (!spool) {
      req.body.append(chunk.data(), n);
    } else if (writeAll(spool->fd, chunk.data(), n)) {
      spool->bytes += n;
    } else {
      co_return refusal(errno == ENOSPC ? 413 : 500,
                        errno == ENOSPC ? "payload_too_large" : "internal",
                        "cannot spool the request body: " + std::string(std::strerror(errno)));
    }
  }
  req.spooled = std::move(spool);
  co_return std::nullopt;
}

}  // namespace sluice::serve::detail
