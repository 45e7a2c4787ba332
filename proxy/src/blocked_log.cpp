// The blocked-attempt log (blocked_log.hpp): nfnetlink_log messages (linux/netfilter/
// nfnetlink_log.h) decoded with every length checked against what was received, and the rows.
#include "blocked_log.hpp"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "log.hpp"
#include "shadow.hpp"
#include "sluice/base/clock.hpp"

namespace sluice::proxy::blocked {
namespace {

constexpr char kNotAllowed[] =
    " is not allowed out of the sandbox (only TCP through the proxy and DNS to 127.0.0.53)";
constexpr std::size_t kMaxExtensionHeaders = 8;
constexpr int kMaxDatagramsPerWake = 1024;
// One datagram: a message of at most ~300 bytes with a 128-byte copy (the kernel's default
// buffer per batch is 4 KiB; with a queue threshold of 1 each message comes alone).
constexpr std::size_t kBufferBytes = 16384;

std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }

std::string protocolName(unsigned proto) {
  switch (proto) {
    case IPPROTO_TCP:
      return "TCP";
    case IPPROTO_UDP:
      return "UDP";
    case IPPROTO_ICMP:
      return "ICMP";
    case IPPROTO_ICMPV6:
      return "ICMPv6";
    case IPPROTO_SCTP:
      return "SCTP";
    case IPPROTO_UDPLITE:
      return "UDP-Lite";
    default:
      return "IP protocol " + std::to_string(proto);
  }
}

bool hasPorts(unsigned proto) {
  return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP ||
         proto == IPPROTO_UDPLITE;
}

// The destination port of the transport header at `off`, if the packet holds it.
std::uint16_t portAt(std::span<const std::uint8_t> p, std::size_t off, unsigned proto) {
  if (!hasPorts(proto) || off > p.size() || p.size() - off < 4) return 0;
  return be16(p.data() + off + 2);
}

std::optional<Attempt> decode4(std::span<const std::uint8_t> p) {
  if (p.size() < 20) return std::nullopt;
  const std::size_t ihl = std::size_t{p[0] & 0x0fu} * 4;
  if (ihl < 20) return std::nullopt;
  const unsigned proto = p[9];
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, p.data() + 16, text, sizeof text);
  Attempt a{protocolName(proto), text, 0};
  const bool later_fragment = (be16(p.data() + 6) & 0x1fff) != 0;
  if (!later_fragment) a.port = portAt(p, ihl, proto);
  return a;
}

std::optional<Attempt> decode6(std::span<const std::uint8_t> p) {
  if (p.size() < 40) return std::nullopt;
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, p.data() + 24, text, sizeof text);
  unsigned next = p[6];
  std::size_t off = 40;
  bool later_fragment = false;
  for (std::size_t i = 0; i < kMaxExtensionHeaders; ++i) {
    if (next != 0 && next != 43 && next != 60 && next != 44 && next != 51) break;
    if (off > p.size() || p.size() - off < 8) {
      off = p.size() + 1;  // cut short: the transport header is not there
      break;
    }
    const unsigned here = next;
    next = p[off];
    if (here == 44) {  // fragment header: 8 bytes
      later_fragment = (be16(p.data() + off + 2) & 0xfff8) != 0;
      off += 8;
    } else if (here == 51) {  // AH: length in 4-byte units, minus 2
      off += (std::size_t{p[off + 1]} + 2) * 4;
    } else {  // hop-by-hop, routing, destination options: 8-byte units, minus 1
      off += (std::size_t{p[off + 1]} + 1) * 8;
    }
  }
  Attempt a{protocolName(next), text, 0};
  if (!later_fragment) a.port = portAt(p, off, next);
  return a;
}

}  // namespace

std::optional<Attempt> decodePacket(std::span<const std::uint8_t> packet) {
  if (packet.empty()) return std::nullopt;
  switch (packet[0] >> 4) {
    case 4:
      return decode4(packet);
    case 6:
      return decode6(packet);
    default:
      return std::nullopt;
  }
}

std::vector<LogMessage> decodeDatagram(std::span<const std::uint8_t> d) {
  std::vector<LogMessage> out;
  constexpr std::uint16_t kPacket = NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET;
  std::size_t at = 0;
  while (d.size() - at >= sizeof(nlmsghdr)) {
    nlmsghdr h{};
    std::memcpy(&h, d.data() + at, sizeof h);
    if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > d.size() - at) break;
    const std::size_t body = at + NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
    const std::size_t end = at + h.nlmsg_len;
    if (h.nlmsg_type == kPacket && body <= end) {
      LogMessage m;
      std::size_t a = body;
      while (end - a >= NLA_HDRLEN) {
        nlattr attr{};
        std::memcpy(&attr, d.data() + a, sizeof attr);
        if (attr.nla_len < NLA_HDRLEN || attr.nla_len > end - a) break;
        const auto value = d.subspan(a + NLA_HDRLEN, attr.nla_len - NLA_HDRLEN);
        switch (attr.nla_type & NLA_TYPE_MASK) {
          case NFULA_PAYLOAD:
            m.attempt = decodePacket(value);
            break;
          case NFULA_SEQ:
            if (value.size() == 4) {
              std::uint32_t be = 0;
              std::memcpy(&be, value.data(), 4);
              m.seq = ntohl(be);
            }
            break;
          default:
            break;
        }
        const std::size_t step = NLA_ALIGN(attr.nla_len);
        if (step > end - a) break;
        a += step;
      }
      out.push_back(std::move(m));
    }
    const std::size_t step = NLMSG_ALIGN(h.nlmsg_len);
    if (step > d.size() - at) break;
    at += step;
  }
  return out;
}

std::string describe(const Attempt& a) {
  if (a.address.empty()) return a.protocol;
  std::string s = a.protocol + " to ";
  const bool v6 = a.address.find(':') != std::string::npos;
  if (a.port == 0) return s + a.address;
  return s + (v6 ? "[" + a.address + "]" : a.address) + ":" + std::to_string(a.port);
}

Log::Log(net::io_context& ioc, std::shared_ptr<Context> ctx, std::string execution_id,
         std::string workflow, std::string policy_sha256)
    : ctx_(std::move(ctx)),
      execution_id_(std::move(execution_id)),
      workflow_(std::move(workflow)),
      policy_sha256_(std::move(policy_sha256)),
      strand_(net::make_strand(ioc)),
      sock_(strand_),
      summary_timer_(strand_) {}

std::expected<void, Error> Log::adopt(int fd) {
  int domain = 0, protocol = 0;
  socklen_t len = sizeof domain;
  const bool ok =
      ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_NETLINK &&
      (len = sizeof protocol, ::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0) &&
      protocol == NETLINK_NETFILTER;
  if (!ok) {
    if (fd >= 0) ::close(fd);
    return std::unexpected(
        Error{base::Code::kInvalidArgument,
              "adoptBlockedLog: fd " + std::to_string(fd) + " is not a NETLINK_NETFILTER socket"});
  }
  ErrorCode ec;
  sock_.assign(fd, ec);
  if (ec) {
    ::close(fd);
    return std::unexpected(Error{base::Code::kIo, "adoptBlockedLog: " + ec.message()});
  }
  return {};
}

void Log::start() { waitReadable(); }

void Log::waitReadable() {
  sock_.async_wait(net::posix::stream_descriptor::wait_read,
                   net::bind_executor(strand_, [self = shared_from_this()](const ErrorCode& ec) {
                     self->onReadable(ec);
                   }));
}

void Log::onReadable(const ErrorCode& ec) {
  if (closed_ || !sock_.is_open() || ec == net::error::operation_aborted) return;
  if (ec) {
    log().warn("blocked-attempt log of execution {}: {}", execution_id_, ec.message());
    return;
  }
  drain();
  waitReadable();
}

void Log::drain() {
  if (!sock_.is_open()) return;
  if (!buf_) buf_ = std::make_unique_for_overwrite<std::uint8_t[]>(kBufferBytes);
  for (int i = 0; i < kMaxDatagramsPerWake; ++i) {
    const ssize_t n = ::recv(sock_.native_handle(), buf_.get(), kBufferBytes, MSG_DONTWAIT);
    if (n > 0) {
      handle({buf_.get(), static_cast<std::size_t>(n)});
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) {  // the kernel dropped messages; the next seq says how many
      overflowed_ = true;
      armSummary();
      continue;
    }
    return;  // EAGAIN, or nothing more to read
  }
}

void Log::handle(std::span<const std::uint8_t> datagram) {
  for (const LogMessage& m : decodeDatagram(datagram)) {
    if (m.seq) {
      if (const std::uint64_t lost = seq_.next(*m.seq); lost > 0) {
        lost_ += lost;
        overflowed_ = false;
        armSummary();
      }
    }
    record(m.attempt ? *m.attempt : Attempt{"a packet that could not be decoded", "", 0});
  }
}

void Log::record(const Attempt& a) {
  const std::string reason(policy::reasonName(policy::Reason::kProtocolNotAllowed));
  if (account_) account_->noteDenied(a.address, a.port, "", reason);
  if (budget_.take()) {
    row(a.address, a.port, describe(a) + kNotAllowed);
    return;
  }
  last_suppressed_ = a;
  armSummary();
}

void Log::armSummary() {
  if (summary_armed_ || closed_) return;
  summary_armed_ = true;
  net::co_spawn(strand_, summaryLater(shared_from_this()),
                LogEscapedException{"blocked-attempt log (summary)"});
}

net::awaitable<void> Log::summaryLater(std::shared_ptr<Log> self) {
  self->summary_timer_.expires_after(std::chrono::seconds(1));
  ErrorCode ec;
  co_await self->summary_timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
  self->summary_armed_ = false;
  if (self->closed_) co_return;  // close() wrote what was pending
  self->flushSummary();
}

void Log::flushSummary() {
  if (const std::uint64_t n = budget_.drainSuppressed(); n > 0 && last_suppressed_) {
    row(last_suppressed_->address, last_suppressed_->port,
        std::to_string(n) + " more blocked attempts since the previous row (the last: " +
            describe(*last_suppressed_) +
            "): only TCP through the proxy and DNS to 127.0.0.53 may leave the sandbox; only the "
            "first " +
            std::to_string(kRowsPerExecution) +
            " blocked attempts of an execution are rows of their own, then one row a second "
            "counts the rest");
  }
  if (lost_ > 0 || overflowed_) {
    const std::string reason(policy::reasonName(policy::Reason::kProtocolNotAllowed));
    if (account_ && lost_ > 0) account_->noteDenied("", 0, "", reason, lost_);
    row("", 0,
        (lost_ > 0 ? std::to_string(lost_) : std::string("an unknown number of")) +
            " blocked attempts were lost before sluice read them: the kernel's log buffer for "
            "the sandbox overflowed (ENOBUFS); they were rejected all the same");
    lost_ = 0;
    overflowed_ = false;
  }
}

void Log::row(std::string host, std::uint16_t port, std::string detail) {
  const std::string reason(policy::reasonName(policy::Reason::kProtocolNotAllowed));
  log().info("deny blocked {}:{} reason={}: {}", host, port, reason, detail);
  if (!ctx_->sink) return;
  audit::ConnectionEvent ev;
  ev.id = ctx_->newConnectionId(execution_id_);
  ev.execution_id = ctx_->row_names->of(execution_id_);
  ev.workflow = workflow_;
  ev.policy_sha256 = policy_sha256_;
  ev.ts_ms = base::nowMs();
  ev.kind = audit::ConnectionKind::kBlocked;
  ev.host = std::move(host);
  ev.port = port;
  ev.decision = audit::Decision::kDeny;
  ev.reason = reason;
  ev.detail = std::move(detail);
  ev.tls = audit::TlsHandling::kNone;
  stampShadow(account_ ? account_->shadow.get() : nullptr, ev);
  ctx_->sink->recordConnection(std::move(ev));
}

void Log::closeNow() {
  if (closed_) return;
  drain();
  flushSummary();
  closed_ = true;
  summary_timer_.cancel();
  ErrorCode ec;
  sock_.close(ec);
}

std::future<void> Log::close(bool running) {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  if (!running) {
    closeNow();
    done->set_value();
    return fut;
  }
  net::post(strand_, [self = shared_from_this(), done] {
    self->closeNow();
    done->set_value();
  });
  return fut;
}

}  // namespace sluice::proxy::blocked
