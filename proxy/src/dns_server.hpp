// sluice's DNS on the wire: one Endpoint per execution serves the UDP and TCP sockets the
// runner bound to 127.0.0.53:53 inside the sandbox's network namespace (handed over as fds,
// like the proxy listener). Everything of one endpoint runs on one strand. Answers come from
// dns::Answerer; every query becomes a dns_queries audit row.
#pragma once

#include <expected>
#include <list>
#include <memory>
#include <string>

#include "context.hpp"
#include "dns_answerer.hpp"
#include "sluice/audit/event_sink.hpp"
#include "sluice/base/net.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy::dns {

class Endpoint : public std::enable_shared_from_this<Endpoint> {
 public:
  /// At most this many TCP clients at once; more are closed at accept.
  static constexpr std::size_t kMaxTcpClients = 16;
  /// A TCP client idle (no complete query) this long is closed.
  static constexpr std::chrono::seconds kTcpIdle{10};

  Endpoint(net::io_context& ioc, std::string execution_id, std::shared_ptr<Answerer> answerer,
           std::shared_ptr<audit::EventSink> sink);

  /// Takes ownership of `udp_fd` and `tcp_fd` (either may be -1, not both) and checks that
  /// they are a bound UDP socket and a listening TCP socket; closes both on error.
  std::expected<void, Error> adopt(int udp_fd, int tcp_fd);
  /// Counts every query (and its denials) in `account` too (the execution's receipt); call
  /// before start().
  void chargeTo(std::shared_ptr<Account> account) { account_ = std::move(account); }
  /// Rows name the execution `names` says runs in this one now (a session's exec); call before
  /// start().
  void nameRowsWith(std::shared_ptr<const RowNames> names) { row_names_ = std::move(names); }
  /// Starts serving (the io_context may start running later).
  void start();
  /// Closes the sockets and every TCP client; `running`: the io_context threads run, so the
  /// close is done on the endpoint's strand (waits up to 2 s for it).
  void close(bool running);

  const std::string& executionId() const { return execution_id_; }
  Answerer& answerer() { return *answerer_; }

 private:
  struct TcpClient {
    explicit TcpClient(tcp::socket s);
    tcp::socket socket;
    net::steady_timer idle;
  };
  static net::awaitable<void> udpLoop(std::shared_ptr<Endpoint> self);
  static net::awaitable<void> acceptLoop(std::shared_ptr<Endpoint> self);
  static net::awaitable<void> serveTcp(std::shared_ptr<Endpoint> self,
                                       std::shared_ptr<TcpClient> client);
  static net::awaitable<void> idleWatch(std::shared_ptr<TcpClient> client);
  /// Answers one message and writes its audit row.
  Outcome handle(std::span<const std::uint8_t> message, Transport transport);
  void closeNow();

  std::string execution_id_;
  std::shared_ptr<const RowNames> row_names_;
  std::shared_ptr<Answerer> answerer_;
  std::shared_ptr<audit::EventSink> sink_;
  std::shared_ptr<Account> account_;  // may be null
  net::strand<net::io_context::executor_type> strand_;
  net::ip::udp::socket udp_;
  tcp::acceptor tcp_;
  std::list<std::weak_ptr<TcpClient>> clients_;  // on the strand
  bool closed_ = false;
};

}  // namespace sluice::proxy::dns
