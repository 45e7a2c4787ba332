// The daemon's HTTP/1.1 server (Beast): Unix-socket listeners (the caller is the peer's uid,
// SO_PEERCRED) and TCP listeners (the caller is the bearer token's name; 401 otherwise), one
// coroutine per connection on its own strand, keep-alive. Admission comes before memory: a
// connection over the caps is refused at accept, the header must arrive within a deadline, the
// caller is authenticated from the header alone, and only then is the body read, up to the
// limit the Planner gives for that endpoint (413 before any byte of a larger announced body),
// into memory or spooled to an unlinked file. Requests go to a Handler; the Reply lets it
// answer whole or stream chunked NDJSON. docs/serve.md "Limits".
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "auth.hpp"
#include "sluice/base/net.hpp"

namespace sluice::serve {

/// A request body written to an unlinked file as it arrived (BodyPlan::spool); the file is
/// closed with the last holder. Read it from offset 0.
struct SpooledBody {
  int fd = -1;
  std::uint64_t bytes = 0;
  SpooledBody() = default;
  SpooledBody(const SpooledBody&) = delete;
  SpooledBody& operator=(const SpooledBody&) = delete;
  ~SpooledBody();
};

/// One request, as the handler sees it.
struct Request {
  http::verb method = http::verb::unknown;
  std::string method_text;
  std::string target;  // path (and query) as sent
  std::string content_type;
  std::string accept;
  std::string body;
  std::shared_ptr<SpooledBody> spooled;  // the body, when its plan spooled it (`body` empty)
  Caller caller;
  /// What admission reserved for this request (BodyPlan::ticket), held until the handler ends.
  std::shared_ptr<void> ticket;
};

/// A refusal decided before the body is read: the JSON error, and Retry-After when nonzero.
struct Refusal {
  int status = 429;
  std::string reason;
  std::string message;
  unsigned retry_after = 0;
};

/// How one request's body is read, decided from its head once the caller is known.
struct BodyPlan {
  std::size_t limit = 0;          // bytes; an announced larger body is 413 before any byte is read
  bool spool = false;             // to an unlinked file (Request::spooled), not memory
  std::shared_ptr<void> ticket;   // moved into Request::ticket
  std::optional<Refusal> refuse;  // answered instead, the body unread (and the connection closed)
};
/// `head` is the request without its body.
using Planner = std::function<BodyPlan(const Request& head)>;

/// One whole answer written from a thread other than its connection's, so that it leaves
/// without passing back through the connection's strand (Api::offload: the worker that made it
/// writes it). Made on the strand by Reply::direct(), with its own duplicate of the socket: a
/// close on the strand (a client gone mid-run) cannot then hand the descriptor's number to
/// another connection while the worker writes. Its write() may run on any thread, but only
/// while the strand neither reads nor writes the connection (a handler waiting for the work
/// that writes), and once. What the socket did not take without blocking is left for
/// Reply::sendRest(), on the strand.
class DirectAnswer {
 public:
  DirectAnswer(int socket, unsigned version, bool keep_alive);
  ~DirectAnswer();
  DirectAnswer(const DirectAnswer&) = delete;
  DirectAnswer& operator=(const DirectAnswer&) = delete;

  /// The response Reply::send() would write, serialized and written now without blocking.
  /// True if all of it left.
  bool write(http::status status, const std::string& content_type, std::string body);
  /// Whether write() ran, and what it left unwritten (everything, if the socket failed).
  bool written() const { return written_; }
  std::string_view rest() const { return std::string_view(wire_).substr(sent_); }

 private:
  int fd_ = -1;
  unsigned version_;
  bool keep_alive_;
  bool written_ = false;
  std::string wire_;
  std::size_t sent_ = 0;
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
  /// A DirectAnswer for this request (null if the socket cannot be duplicated).
  virtual std::unique_ptr<DirectAnswer> direct() = 0;
  /// Writes what `answer` left unwritten. False if the connection failed.
  virtual net::awaitable<bool> sendRest(const DirectAnswer& answer) = 0;
  /// The next send() carries `Retry-After: seconds` (429, 503).
  void retryAfter(unsigned seconds) { retry_after_ = seconds; }

 protected:
  unsigned retry_after_ = 0;
};

/// Handles one request (the handler must answer through `reply` exactly once).
using Handler = std::function<net::awaitable<void>(Request&, Reply&)>;

/// Answers a request the server refuses before any handler runs (401, 413, 400, ...).
using ErrorWriter =
    std::function<std::string(int status, const std::string& reason, const std::string& message)>;

struct HttpServerOptions {
  std::size_t max_body_bytes = 64u << 20;  // the limit when there is no Planner
  std::vector<Token> tokens;               // for TCP listeners
  std::vector<unsigned> approver_uids;
  /// Connections open at once, all listeners (503 + Retry-After above), and per peer: a TCP
  /// client's address, a Unix client's uid (429 + Retry-After above).
  std::size_t max_connections = 512;
  std::size_t max_connections_per_peer = 128;
  /// From the moment the server waits for a request until its whole header is in: a client
  /// that sends it slower (slowloris) is cut off.
  std::chrono::milliseconds header_timeout{10000};
  /// Longest wait for the next bytes of a body.
  std::chrono::milliseconds body_idle_timeout{30000};
  /// Where spooled bodies are written (unlinked files); empty: the system's temp directory.
  std::string spool_dir;
  Planner plan;
  /// Told the reason of every refusal the server answers itself (401, connection caps).
  std::function<void(const std::string& reason)> refused;
};

class HttpServer {
 public:
  HttpServer(net::io_context& ioc, HttpServerOptions options, Handler handler, ErrorWriter errors);
  ~HttpServer();
  /// "unix:/path" (created 0660, a stale socket replaced, the directory made) or HOST:PORT.
  /// Returns the bound endpoint text.
  std::expected<std::string, std::string> listen(const std::string& spec);
  /// A listening socket made by systemd (sluice.socket): Unix, or TCP with tokens only.
  /// Returns its endpoint text; the server owns the fd from here on.
  std::expected<std::string, std::string> adopt(int fd);
  /// Stops accepting and removes the Unix socket files.
  void close();

  struct State;  // shared with the accept and connection coroutines

 private:
  std::shared_ptr<State> state_;
};

}  // namespace sluice::serve
