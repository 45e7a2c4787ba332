// The blocked-attempt log of transparent capture (docs/sandbox.md "Blocked attempts"): the
// sandbox's netns rejects whatever leaves it other than redirected TCP and DNS to 127.0.0.53,
// and logs each rejected packet to an nfnetlink_log group first. This reads that group's
// socket (made in the sandbox's netns by the runner), decodes the packets' headers and writes
// one connections row per attempt (kind "blocked", reason protocol_not_allowed), rate-limited.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "context.hpp"
#include "sluice/base/net.hpp"

namespace sluice::proxy::blocked {

/// What one rejected packet tried to reach.
struct Attempt {
  std::string protocol;    ///< "UDP", "TCP", "ICMP", "ICMPv6", "SCTP", or "IP protocol N"
  std::string address;     ///< destination address (IPv4 dotted, IPv6 RFC 5952)
  std::uint16_t port = 0;  ///< UDP/TCP/SCTP/UDP-Lite destination port; 0 otherwise
};

/// Decodes a packet from its network header on (IPv4 or IPv6 by the version nibble; IPv6
/// extension headers are walked). Nothing (never a crash) when the bytes are not a packet
/// whose destination can be read; a transport header cut short leaves the port 0.
std::optional<Attempt> decodePacket(std::span<const std::uint8_t> packet);

/// One NFULNL_MSG_PACKET message of an nfnetlink_log datagram.
struct LogMessage {
  std::optional<Attempt> attempt;    ///< empty: no payload, or one that does not decode
  std::optional<std::uint32_t> seq;  ///< NFULA_SEQ (the instance's sequence number)
};

/// Every packet message of one datagram read from an nfnetlink_log socket (other message
/// types are skipped; a truncated message ends the walk).
std::vector<LogMessage> decodeDatagram(std::span<const std::uint8_t> datagram);

/// "UDP to 192.0.2.53:53", "ICMP to 192.0.2.1", "TCP to [2001:db8::1]:443".
std::string describe(const Attempt& a);

/// Which attempts become a row of their own: the first `per_execution` do; after that they are
/// counted and reported by a summary row (at most one a second, written by Log).
class RowBudget {
 public:
  explicit RowBudget(std::uint64_t per_execution) : left_(per_execution) {}
  /// True: write this attempt's own row. False: it was counted for the next summary.
  bool take() {
    if (left_ > 0) {
      --left_;
      return true;
    }
    ++suppressed_;
    return false;
  }
  /// The attempts counted since the last call (for a summary row), and zero again.
  std::uint64_t drainSuppressed() { return std::exchange(suppressed_, 0); }
  std::uint64_t suppressed() const { return suppressed_; }

 private:
  std::uint64_t left_;
  std::uint64_t suppressed_ = 0;
};

/// The sequence numbers of one instance: how many messages the kernel could not deliver.
class SeqTracker {
 public:
  /// The messages lost before this one (0 for the first, or in order).
  std::uint64_t next(std::uint32_t seq) {
    std::uint64_t lost = 0;
    if (have_ && seq - expected_ < (1u << 31)) lost = seq - expected_;
    have_ = true;
    expected_ = seq + 1;
    return lost;
  }

 private:
  bool have_ = false;
  std::uint32_t expected_ = 0;
};

inline constexpr std::uint64_t kRowsPerExecution = 1000;

/// One execution's log socket on the proxy's io_context (a strand of its own).
class Log : public std::enable_shared_from_this<Log> {
 public:
  Log(net::io_context& ioc, std::shared_ptr<Context> ctx, std::string execution_id,
      std::string workflow, std::string policy_sha256);
  /// Takes the fd (closes it on error too): it must be a NETLINK_NETFILTER socket.
  std::expected<void, Error> adopt(int fd);
  void chargeTo(std::shared_ptr<Account> account) { account_ = std::move(account); }
  /// Starts waiting for the socket (from any thread, once, before anything else uses it: it
  /// wakes no I/O thread).
  void start();
  /// Reads what the socket holds, writes the pending summary rows and closes: at once when the
  /// io_context does not run, else on the strand; the future is ready when it is done (the
  /// caller waits, up to 2 s, after starting other closes: one round trip for all of them).
  std::future<void> close(bool running);
  const std::string& executionId() const { return execution_id_; }

 private:
  void waitReadable();  // the next readiness wait (its handler runs on the strand)
  void onReadable(const ErrorCode& ec);
  static net::awaitable<void> summaryLater(std::shared_ptr<Log> self);
  void drain();  // every datagram the socket holds now (non-blocking)
  void handle(std::span<const std::uint8_t> datagram);
  void record(const Attempt& a);
  void armSummary();  // a summary row within a second (one timer at a time)
  void flushSummary();
  void row(std::string host, std::uint16_t port, std::string detail);
  void closeNow();

  std::shared_ptr<Context> ctx_;
  std::string execution_id_, workflow_, policy_sha256_;
  std::shared_ptr<Account> account_;
  net::strand<net::io_context::executor_type> strand_;
  net::posix::stream_descriptor sock_;
  net::steady_timer summary_timer_;
  RowBudget budget_{kRowsPerExecution};
  SeqTracker seq_;
  std::uint64_t lost_ = 0;   // known lost (sequence gaps), not yet in a row
  bool overflowed_ = false;  // ENOBUFS read and no gap seen since
  std::optional<Attempt> last_suppressed_;
  bool summary_armed_ = false;
  bool closed_ = false;
  std::unique_ptr<std::uint8_t[]> buf_;  // made at the first read: most runs send nothing
};

}  // namespace sluice::proxy::blocked
