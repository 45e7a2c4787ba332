// The daemon's HTTP/1.1 server (Beast): Unix-socket listeners (the caller is the peer's uid,
// SO_PEERCRED) and TCP listeners (the caller is the bearer token's name; 401 otherwise), one
// coroutine per connection on its own strand, keep-alive, header and body limits. Requests go
// to a Handler; the Reply lets it answer whole or stream chunked NDJSON.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "auth.hpp"
#include "net.hpp"

namespace sluice::serve {

/// One request, as the handler sees it.
struct Request {
  http::verb method = http::verb::unknown;
  std::string method_text;
  std::string target;  // path (and query) as sent
  std::string content_type;
  std::string accept;
  std::string body;
  Caller caller;
};

/// How a handler answers: once with send(), or as a chunked stream.
class Reply {
 public:
  virtual ~Reply() = default;
  virtual net::awaitable<bool> send(http::status status, std::string content_type,
                                    std::string body) = 0;
  virtual net::awaitable<bool> beginStream(http::status status, std::string content_type) = 0;
  virtual net::awaitable<bool> chunk(std::string data) = 0;
  virtual net::awaitable<bool> endStream() = 0;
  /// The connection's strand: post here to wake the handler.
  virtual net::any_io_executor executor() = 0;
  /// Calls `on_close` (on the strand) if the client closes its end while the handler works
  /// (a client that went away mid-run). Until stopWatching().
  virtual void watchClose(std::function<void()> on_close) = 0;
  virtual void stopWatching() = 0;
};

/// Handles one request (the handler must answer through `reply` exactly once).
using Handler = std::function<net::awaitable<void>(Request&, Reply&)>;

/// Answers a request the server refuses before any handler runs (401, 413, 400, ...).
using ErrorWriter =
    std::function<std::string(int status, const std::string& reason, const std::string& message)>;

struct HttpServerOptions {
  std::size_t max_body_bytes = 64u << 20;
  std::vector<Token> tokens;  // for TCP listeners
  std::vector<unsigned> approver_uids;
};

class HttpServer {
 public:
  HttpServer(net::io_context& ioc, HttpServerOptions options, Handler handler, ErrorWriter errors);
  ~HttpServer();
  /// "unix:/path" (created 0660, a stale socket replaced, the directory made) or HOST:PORT.
  /// Returns the bound endpoint text.
  std::expected<std::string, std::string> listen(const std::string& spec);
  /// Stops accepting and removes the Unix socket files.
  void close();

  struct State;  // shared with the accept and connection coroutines

 private:
  std::shared_ptr<State> state_;
};

}  // namespace sluice::serve
