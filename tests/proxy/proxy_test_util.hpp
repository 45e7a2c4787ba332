// Test harness for the proxy: a fake audit sink, loopback upstream servers (HTTP with Beast,
// a TCP echo server, a resetting server) run on their own io_context thread, and a blocking
// "hostile" client built on plain sockets so tests can send exactly the bytes they want.
#pragma once

// clang-format off
#include <utility>  // before Asio: asio#944
// clang-format on

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sluice/audit/event_sink.hpp"

namespace sluice::proxy::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

/// Collects audit events; tests wait for the rows they expect.
class FakeSink : public audit::EventSink {
 public:
  void recordPolicy(const std::string& sha, const std::string& wf, const std::string&) override {
    std::lock_guard lock(mu_);
    policies_.emplace_back(sha, wf);
  }
  void recordConnection(audit::ConnectionEvent e) override {
    std::lock_guard lock(mu_);
    connections_.push_back(std::move(e));
    cv_.notify_all();
  }
  void recordRequest(audit::RequestEvent e) override {
    std::lock_guard lock(mu_);
    requests_.push_back(std::move(e));
    cv_.notify_all();
  }
  void recordForward(audit::ForwardEvent e) override {
    std::lock_guard lock(mu_);
    forwards_.push_back(std::move(e));
    cv_.notify_all();
  }
  void recordDns(audit::DnsEvent e) override {
    std::lock_guard lock(mu_);
    dns_.push_back(std::move(e));
    cv_.notify_all();
  }
  void recordApproval(audit::ApprovalEvent e) override {
    std::lock_guard lock(mu_);
    approvals_.push_back(std::move(e));
    cv_.notify_all();
  }
  bool healthy() const override { return healthy_.load(); }
  void setHealthy(bool h) { healthy_ = h; }

  std::vector<audit::ApprovalEvent> approvals() {
    std::lock_guard lock(mu_);
    return approvals_;
  }

  std::vector<audit::ConnectionEvent> connections() {
    std::lock_guard lock(mu_);
    return connections_;
  }
  std::vector<audit::RequestEvent> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<audit::ForwardEvent> forwards() {
    std::lock_guard lock(mu_);
    return forwards_;
  }
  std::vector<audit::DnsEvent> dns() {
    std::lock_guard lock(mu_);
    return dns_;
  }
  /// Waits (bounded) until at least `n` DNS rows have arrived; returns how many there are.
  std::size_t waitDnsCount(std::size_t n,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return dns_.size() >= n; });
    return dns_.size();
  }
  /// Waits (bounded) until at least `n` requests rows have arrived; returns how many there are.
  std::size_t waitRequestCount(std::size_t n,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
    return requests_.size();
  }
  std::size_t policyCount() {
    std::lock_guard lock(mu_);
    return policies_.size();
  }

  /// Waits (bounded) for a connection row matching `pred`.
  std::optional<audit::ConnectionEvent> waitConnection(
      const std::function<bool(const audit::ConnectionEvent&)>& pred,
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    std::optional<audit::ConnectionEvent> found;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& e : connections_)
        if (pred(e)) {
          found = e;
          return true;
        }
      return false;
    });
    return found;
  }

  std::optional<audit::RequestEvent> waitRequest(
      const std::function<bool(const audit::RequestEvent&)>& pred,
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    std::optional<audit::RequestEvent> found;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& e : requests_)
        if (pred(e)) {
          found = e;
          return true;
        }
      return false;
    });
    return found;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, std::string>> policies_;
  std::vector<audit::ConnectionEvent> connections_;
  std::vector<audit::RequestEvent> requests_;
  std::vector<audit::ForwardEvent> forwards_;
  std::vector<audit::ApprovalEvent> approvals_;
  std::vector<audit::DnsEvent> dns_;
  std::atomic<bool> healthy_{true};
};

/// What an upstream server saw.
struct UpstreamLog {
  std::atomic<int> accepted{0};
  std::mutex mu;
  std::vector<std::string> request_heads;  // method, target and headers of each request
};

/// Loopback servers on one io_context thread:
///  - HTTP (Beast): "/" echoes the request head in the body; "/big/N" returns N bytes;
///    "/chunked" a chunked body; "/reset" a partial body then RST; "/slow" never answers;
///    "/close" answers with Connection: close; "/drop-next" answers and keeps the connection,
///    then closes it unanswered when the next request arrives (a stale kept-alive connection). A
///    request with `X-Test-Interim` gets a 103 first.
///  - echo: echoes bytes; on EOF writes "BYE" and half-closes.
///  - reset: accepts, sends "partial", then resets.
class Upstreams {
 public:
  Upstreams();
  ~Upstreams();
  std::uint16_t httpPort() const { return http_port_; }
  std::uint16_t echoPort() const { return echo_port_; }
  std::uint16_t resetPort() const { return reset_port_; }
  UpstreamLog& httpLog() { return http_log_; }
  UpstreamLog& echoLog() { return echo_log_; }

 private:
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  tcp::acceptor http_acc_;
  tcp::acceptor echo_acc_;
  tcp::acceptor reset_acc_;
  std::uint16_t http_port_ = 0;
  std::uint16_t echo_port_ = 0;
  std::uint16_t reset_port_ = 0;
  UpstreamLog http_log_;
  UpstreamLog echo_log_;
  std::vector<std::thread> threads_;
};

/// A raw HTTP/1.1 upstream on 127.0.0.1:0 that logs every byte it receives, unparsed (so a
/// request no parser would accept is still seen), and answers each request head with 200 and
/// its request line as the body (X-Test-Interim: a 103 first). Requests must carry no body.
class RawUpstream {
 public:
  RawUpstream();
  ~RawUpstream();
  std::uint16_t port() const { return port_; }
  /// Every byte received, on every connection, in arrival order.
  std::string received();
  /// The request line of every request head received ("GET /x HTTP/1.1").
  std::vector<std::string> requestLines();

  struct Log {
    std::mutex mu;
    std::string bytes;
    std::vector<std::string> lines;
  };

 private:
  net::io_context ioc_;
  tcp::acceptor acc_;
  std::uint16_t port_ = 0;
  Log log_;
  std::thread thread_;
};

/// A parsed response as the client saw it.
struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool closed = false;  // server closed after the response
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

/// A blocking client socket with a receive timeout (every read bounded in time).
class Client {
 public:
  /// Connects to 127.0.0.1:port, from `source` (a loopback address such as 127.0.0.2) if given.
  explicit Client(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5),
                  const char* source = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool send(std::string_view bytes);
  void shutdownWrite();
  /// Reads one HTTP response (status line, headers, Content-Length/chunked body or to EOF).
  /// status 0 when nothing parseable arrived before EOF/timeout.
  Response readResponse(bool head_only = false);
  /// Reads exactly n bytes (or less on EOF/timeout).
  std::string readN(std::size_t n);
  /// Reads until EOF or timeout.
  std::string readAll();
  /// True when the peer closed (EOF or reset) within the timeout.
  bool waitClosed();
  int fd() const { return fd_; }

 private:
  bool fill();
  int fd_ = -1;
  std::string buf_;
};

/// "GET http://host:port/path HTTP/1.1" with Host and extra header lines.
std::string getRequest(const std::string& authority, const std::string& path,
                       const std::string& extra = "", const std::string& method = "GET");
/// "CONNECT authority HTTP/1.1" with Host.
std::string connectRequest(const std::string& authority, const std::string& extra = "");

}  // namespace sluice::proxy::testing
