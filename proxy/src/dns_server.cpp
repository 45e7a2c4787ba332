// dns::Endpoint (dns_server.hpp): UDP receive loop, TCP accept loop, TCP clients with RFC 1035
// 4.2.2 framing (two-byte length prefix; several queries may arrive in one write).
#include "dns_server.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <future>

#include "log.hpp"
#include "sluice/base/clock.hpp"

namespace sluice::proxy::dns {
namespace {

// The socket's type and address family, or an error naming the fd.
std::expected<int, Error> socketFamily(int fd, int want_type, bool want_listening,
                                       const char* what) {
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != want_type)
    return std::unexpected(
        Error{base::Code::kInvalidArgument,
              "adoptDns: fd " + std::to_string(fd) + " is not a " + what + " socket"});
  if (want_listening) {
    int accepting = 0;
    len = sizeof accepting;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting)
      return std::unexpected(Error{base::Code::kInvalidArgument,
                                   "adoptDns: TCP fd " + std::to_string(fd) + " is not listening"});
  }
  sockaddr_storage ss{};
  len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
    return std::unexpected(
        Error{base::Code::kInvalidArgument,
              "adoptDns: fd " + std::to_string(fd) + " is not an IPv4/IPv6 socket"});
  return ss.ss_family;
}

}  // namespace

Endpoint::TcpClient::TcpClient(tcp::socket s) : socket(std::move(s)), idle(socket.get_executor()) {}

Endpoint::Endpoint(net::io_context& ioc, std::string execution_id,
                   std::shared_ptr<Answerer> answerer, std::shared_ptr<audit::EventSink> sink)
    : execution_id_(std::move(execution_id)),
      answerer_(std::move(answerer)),
      sink_(std::move(sink)),
      strand_(net::make_strand(ioc)),
      udp_(strand_),
      tcp_(strand_) {}

std::expected<void, Error> Endpoint::adopt(int udp_fd, int tcp_fd) {
  auto fail = [&](Error e) -> std::expected<void, Error> {
    if (udp_fd >= 0 && !udp_.is_open()) ::close(udp_fd);
    if (tcp_fd >= 0 && !tcp_.is_open()) ::close(tcp_fd);
    closeNow();
    return std::unexpected(std::move(e));
  };
  if (udp_fd < 0 && tcp_fd < 0)
    return fail(Error{base::Code::kInvalidArgument, "adoptDns: neither a UDP nor a TCP socket"});
  ErrorCode ec;
  if (udp_fd >= 0) {
    auto fam = socketFamily(udp_fd, SOCK_DGRAM, false, "UDP");
    if (!fam) return fail(fam.error());
    udp_.assign(*fam == AF_INET ? net::ip::udp::v4() : net::ip::udp::v6(), udp_fd, ec);
    if (ec) return fail(Error{base::Code::kIo, "adoptDns: " + ec.message()});
  }
  if (tcp_fd >= 0) {
    auto fam = socketFamily(tcp_fd, SOCK_STREAM, true, "TCP");
    if (!fam) return fail(fam.error());
    tcp_.assign(*fam == AF_INET ? tcp::v4() : tcp::v6(), tcp_fd, ec);
    if (ec) return fail(Error{base::Code::kIo, "adoptDns: " + ec.message()});
  }
  return {};
}

void Endpoint::start() {
  auto self = shared_from_this();
  if (udp_.is_open()) net::co_spawn(strand_, udpLoop(self), LogEscapedException{"DNS (UDP)"});
  if (tcp_.is_open())
    net::co_spawn(strand_, acceptLoop(self), LogEscapedException{"DNS (TCP accept)"});
}

void Endpoint::closeNow() {
  closed_ = true;
  ErrorCode ec;
  udp_.close(ec);
  tcp_.close(ec);
  for (auto& w : clients_) {
    if (auto c = w.lock()) {
      c->socket.close(ec);
      c->idle.cancel();
    }
  }
  clients_.clear();
}

void Endpoint::close(bool running) {
  if (!running) {
    closeNow();
    return;
  }
  // The sockets belong to the strand; close them there.
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  net::post(strand_, [self = shared_from_this(), done] {
    self->closeNow();
    done->set_value();
  });
  fut.wait_for(std::chrono::seconds(2));
}

Outcome Endpoint::handle(std::span<const std::uint8_t> message, Transport transport) {
  Outcome o = answerer_->answer(message, transport, !sink_ || sink_->healthy());
  if (!o.problem.empty()) log().debug("DNS query from execution {}: {}", execution_id_, o.problem);
  if (account_)
    account_->noteDnsQuery(o.event.decision != audit::Decision::kAllow &&
                           o.event.decision != audit::Decision::kWouldDeny);
  if (o.record && sink_) {
    o.event.execution_id = row_names_ ? row_names_->of(execution_id_) : execution_id_;
    o.event.ts_ms = base::nowMs();
    sink_->recordDns(o.event);
  }
  return o;
}

net::awaitable<void> Endpoint::udpLoop(std::shared_ptr<Endpoint> self) {
  // Any UDP datagram fits (a query over 512 bytes without EDNS is answered FORMERR).
  std::vector<std::uint8_t> buf(65536);
  int errors = 0;  // in a row: a socket that only fails ends the loop instead of spinning
  for (;;) {
    ErrorCode ec;
    net::ip::udp::endpoint from;
    std::size_t n = co_await self->udp_.async_receive_from(
        net::buffer(buf), from, net::redirect_error(net::use_awaitable, ec));
    if (self->closed_ || !self->udp_.is_open() || ec == net::error::operation_aborted) co_return;
    if (ec) {
      // e.g. ECONNREFUSED left by an earlier reply to a closed port: not this datagram's fault.
      if (++errors > 1000) {
        log().warn("DNS (UDP) for execution {}: giving up after repeated errors: {}",
                   self->execution_id_, ec.message());
        co_return;
      }
      continue;
    }
    errors = 0;
    Outcome o = self->handle({buf.data(), n}, Transport::kUdp);
    if (!o.respond) continue;
    co_await self->udp_.async_send_to(net::buffer(o.response), from,
                                      net::redirect_error(net::use_awaitable, ec));
  }
}

net::awaitable<void> Endpoint::acceptLoop(std::shared_ptr<Endpoint> self) {
  net::steady_timer backoff(self->strand_);
  for (;;) {
    ErrorCode ec;
    tcp::socket s = co_await self->tcp_.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (self->closed_ || !self->tcp_.is_open() || ec == net::error::operation_aborted) co_return;
    if (ec) {
      // EMFILE and the like: back off instead of spinning.
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    std::erase_if(self->clients_, [](const auto& w) { return w.expired(); });
    if (self->clients_.size() >= kMaxTcpClients) continue;  // closed as `s` goes
    auto client = std::make_shared<TcpClient>(std::move(s));
    self->clients_.push_back(client);
    net::co_spawn(self->strand_, serveTcp(self, client), LogEscapedException{"DNS (TCP)"});
    net::co_spawn(self->strand_, idleWatch(client), LogEscapedException{"DNS (TCP idle)"});
  }
}

net::awaitable<void> Endpoint::idleWatch(std::shared_ptr<TcpClient> client) {
  // serveTcp moves the expiry on before every query; a wait that ends with the expiry passed
  // closes the socket, which ends serveTcp's read.
  for (;;) {
    ErrorCode ec;
    co_await client->idle.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (!client->socket.is_open()) co_return;
    if (client->idle.expiry() <= std::chrono::steady_clock::now()) {
      client->socket.close(ec);
      co_return;
    }
  }
}

net::awaitable<void> Endpoint::serveTcp(std::shared_ptr<Endpoint> self,
                                        std::shared_ptr<TcpClient> client) {
  std::vector<std::uint8_t> msg;
  for (;;) {
    client->idle.expires_after(kTcpIdle);
    ErrorCode ec;
    std::array<std::uint8_t, 2> len{};
    co_await net::async_read(client->socket, net::buffer(len),
                             net::redirect_error(net::use_awaitable, ec));
    if (ec || self->closed_) break;
    // The prefix is 16 bits, so no message can exceed 65535 bytes; an empty one has no id to
    // answer and ends the connection.
    const std::size_t n = (std::size_t{len[0]} << 8) | len[1];
    if (n == 0) break;
    msg.resize(n);
    co_await net::async_read(client->socket, net::buffer(msg),
                             net::redirect_error(net::use_awaitable, ec));
    if (ec || self->closed_) break;
    Outcome o = self->handle(msg, Transport::kTcp);
    if (!o.respond) continue;
    std::vector<std::uint8_t> out;
    out.reserve(o.response.size() + 2);
    out.push_back(static_cast<std::uint8_t>(o.response.size() >> 8));
    out.push_back(static_cast<std::uint8_t>(o.response.size()));
    out.insert(out.end(), o.response.begin(), o.response.end());
    co_await net::async_write(client->socket, net::buffer(out),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
  }
  ErrorCode ignored;
  client->socket.close(ignored);
  client->idle.cancel();
}

}  // namespace sluice::proxy::dns
