// CONNECT tunnel relay. Memory matters here (10,000 idle tunnels): an idle tunnel holds two
// sockets, a timer and three small coroutine frames, but no buffers. Each pump reads into a
// per-thread scratch buffer (reading again at once after a read that filled it, else waiting
// for readability first) and writes each read on at once; only a write the peer cannot take
// immediately gets a heap copy of the remainder. A direction that turns out to carry bulk data
// switches to splice(2) through a pipe: no copies to user space, and the pipe lets reading and
// writing overlap.
#include "tunnel.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <vector>

#include "audit_rows.hpp"
#include "log.hpp"
#include "policy_cut.hpp"

namespace sluice::proxy {

namespace {

constexpr std::size_t kScratchBytes = 64 * 1024;
// Directions that carried this much switch from copying to splice(2) through a pipe.
constexpr std::uint64_t kSpliceAfter = 256 * 1024;
// The pipe each bulk direction asks for, and a smaller one to fall back to: an unprivileged
// user's pipes share /proc/sys/fs/pipe-user-pages-soft (64 MiB by default).
constexpr std::size_t kPipeBytes = 1024 * 1024;
constexpr std::size_t kPipeFallbackBytes = 256 * 1024;

// Safe to share per thread: a pump uses it only between a read and a write with no
// suspension in between. Made on a thread's first use: a thread_local array would sit in the
// static TLS block of every thread of every sluice process (zeroed, 16 pages faulted in, at
// each thread's start: `sluice run`'s main, audit and resolver threads too).
std::array<char, kScratchBytes>& scratch() {
  thread_local std::unique_ptr<std::array<char, kScratchBytes>> buf;
  if (!buf) buf.reset(new std::array<char, kScratchBytes>);  // left uninitialised: read into
  return *buf;
}

class Tunnel : public std::enable_shared_from_this<Tunnel>, public Closable {
 public:
  Tunnel(std::shared_ptr<Context> ctx, std::shared_ptr<Account> account,
         policy::EgressLimits limits, tcp::socket client, tcp::socket upstream,
         audit::ConnectionEvent event)
      : ctx_(std::move(ctx)),
        account_(std::move(account)),
        limits_(limits),
        client_(std::move(client)),
        upstream_(std::move(upstream)),
        timer_(client_.get_executor()),
        event_(std::move(event)),
        started_(std::chrono::steady_clock::now()),
        last_activity_(started_) {
    ctx_->live.fetch_add(1);
  }

  ~Tunnel() override {
    closePipes();
    account_->releaseConnection();
    event_.bytes_up = bytes_up_;
    event_.bytes_down = bytes_down_;
    event_.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - started_)
                             .count();
    if (!end_reason_.empty()) {
      event_.reason = end_reason_;
      event_.detail = end_detail_;
    }
    log().debug("tunnel {} {} closed: up {} down {} bytes, {} ms{}", event_.id,
                event_.host + ":" + std::to_string(event_.port), bytes_up_, bytes_down_,
                event_.duration_ms, end_reason_.empty() ? "" : ", " + end_detail_);
    recordConnectionRow(*ctx_, *account_, std::move(event_));
    // Last: closeExecution() waits for this, and the row must be written by then.
    account_->unregisterLive(live_id_);
    ctx_->live.fetch_sub(1);
  }

  void begin(std::string initial_up) {
    live_id_ = account_->registerLive(weak_from_this());
    ErrorCode ec;
    // User-mode non-blocking lets a pump try a read/write right away; Asio's async
    // operations still behave normally on such sockets.
    client_.non_blocking(true, ec);
    upstream_.non_blocking(true, ec);
    auto self = shared_from_this();
    auto ex = client_.get_executor();
    net::co_spawn(ex, pump(self, true, std::move(initial_up)), net::detached);
    net::co_spawn(ex, pump(self, false, {}), net::detached);
    net::co_spawn(ex, watchdog(self), net::detached);
  }

  void abort() override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self] { self->closeAll("closed", "execution ended"); });
  }

  void redecide(const PolicySnapshot& p) override {
    auto self = shared_from_this();
    net::post(client_.get_executor(), [self, p] {
      auto why = tunnelRefusedBy(p, self->event_);
      if (!why || !self->end_reason_.empty()) return;
      self->event_.stamp.policy_generation = p.generation;
      self->closeAll("policy_changed", *why);
      log().info("tunnel {} cut: {}", self->event_.id, self->end_detail_);
    });
  }

 private:
  void closeAll(const std::string& reason = {}, const std::string& detail = {}) {
    if (!reason.empty() && end_reason_.empty()) {
      end_reason_ = reason;
      end_detail_ = detail;
    }
    ErrorCode ec;
    client_.close(ec);
    upstream_.close(ec);
    timer_.cancel();
  }

  void pumpDone() {
    if (--open_pumps_ == 0) closeAll();
  }

  // How one read attempt on a pump's source ended.
  enum class Got { kBytes, kWouldBlock, kEof, kFailed };

  // Relays one direction until EOF (then half-closes the other side) or an error (then
  // closes both). Copies through the scratch buffer until the direction has carried
  // kSpliceAfter bytes, then hands over to splicePump.
  static net::awaitable<void> pump(std::shared_ptr<Tunnel> t, bool up, std::string initial) {
    auto& from = up ? t->client_ : t->upstream_;
    auto& to = up ? t->upstream_ : t->client_;
    ErrorCode ec;
    if (!initial.empty()) {
      if (!t->count(up, initial.size())) co_return t->pumpDone();
      co_await net::async_write(to, net::buffer(initial),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        t->closeAll();
        co_return t->pumpDone();
      }
      std::string().swap(initial);
    }
    bool drained = true;  // nothing is read before the socket is readable: idle tunnels wait
    for (;;) {
      if (int* pipe = t->pipeFor(up)) {
        if (co_await splicePump(t, up, pipe)) break;
        continue;  // splice(2) is not supported here: copy from now on
      }
      // After a read that filled the buffer, read again at once (a busy socket costs no
      // epoll round trip per read); after a short one the socket is most likely drained, so
      // wait first (a chatty tunnel pays no extra read that finds nothing).
      if (drained) {
        co_await from.async_wait(tcp::socket::wait_read,
                                 net::redirect_error(net::use_awaitable, ec));
        if (ec) break;  // closed by the other pump, the watchdog or stop()
      }
      std::size_t n = 0;
      Got got = t->readInto(up, from, n);
      drained = got != Got::kBytes || n < kScratchBytes;
      if (got == Got::kWouldBlock) continue;
      if (got == Got::kEof) {
        t->halfClose(to);
        break;
      }
      if (got == Got::kFailed || !t->count(up, n)) break;
      auto& buf = scratch();
      std::size_t w = to.write_some(net::buffer(buf.data(), n), ec);
      if (ec == net::error::would_block || ec == net::error::try_again) {
        w = 0;
        ec = {};
      }
      if (!ec && w < n) {
        std::vector<char> rest(buf.data() + w, buf.data() + n);
        co_await net::async_write(to, net::buffer(rest),
                                  net::redirect_error(net::use_awaitable, ec));
      }
      if (ec) {
        t->closeAll();
        break;
      }
    }
    t->pumpDone();
  }

  // One non-blocking read into the scratch buffer; an error other than EOF closes the tunnel.
  Got readInto(bool up, tcp::socket& from, std::size_t& n) {
    ErrorCode ec;
    n = from.read_some(net::buffer(scratch()), ec);
    if (ec == net::error::would_block || ec == net::error::try_again) return Got::kWouldBlock;
    if (ec == net::error::eof) return Got::kEof;
    if (ec) return readFailed(up, ec);
    last_activity_ = std::chrono::steady_clock::now();
    return Got::kBytes;
  }

  // A reset from either side ends both directions; an upstream reset is recorded.
  Got readFailed(bool up, const ErrorCode& ec) {
    if (up)
      closeAll();
    else
      closeAll("upstream_error", "upstream connection failed mid-stream: " + ec.message());
    return Got::kFailed;
  }

  // Half-close: the peer finished sending; pass the FIN on and keep the other direction.
  static void halfClose(tcp::socket& to) {
    ErrorCode ignored;
    to.shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Bulk transfer: moves the bytes socket -> pipe -> socket inside the kernel. Fills the pipe
  // while the receiver is slow and drains it while the sender is idle, so reading and writing
  // overlap; waits (for writability while bytes are queued, else for readability) only when
  // neither end can move. Returns true when the direction is finished, false when splice(2)
  // turned out to be unsupported before any byte went through it (copy instead).
  static net::awaitable<bool> splicePump(std::shared_ptr<Tunnel> t, bool up, int* pipe) {
    auto& from = up ? t->client_ : t->upstream_;
    auto& to = up ? t->upstream_ : t->client_;
    std::size_t queued = 0;  // bytes in the pipe, already counted
    bool eof = false;
    // The last splice in found the socket empty or took a short run (a chatty tunnel's
    // message): do not try again before a wait, or each message costs a splice that finds
    // nothing.
    bool drained = false;
    for (;;) {
      bool moved = false;
      if (!eof && !drained) {
        ssize_t r = ::splice(from.native_handle(), nullptr, pipe[1], nullptr, kPipeBytes,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (r > 0) {
          t->last_activity_ = std::chrono::steady_clock::now();
          if (!t->count(up, static_cast<std::size_t>(r))) co_return true;
          queued += static_cast<std::size_t>(r);
          moved = true;
          drained = static_cast<std::size_t>(r) < kScratchBytes;
        } else if (r == 0) {
          eof = true;
        } else if ((errno == EINVAL || errno == ENOSYS) && queued == 0) {
          t->disableSplice();
          co_return false;
        } else if (errno != EAGAIN && errno != EINTR) {
          t->readFailed(up, ErrorCode(errno, boost::system::system_category()));
          co_return true;
        } else {
          drained = errno == EAGAIN;
        }
      }
      if (queued > 0) {
        ssize_t w = ::splice(pipe[0], nullptr, to.native_handle(), nullptr, queued,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (w > 0) {
          queued -= static_cast<std::size_t>(w);
          moved = true;
        } else if (w == 0 || (errno != EAGAIN && errno != EINTR)) {
          t->closeAll();
          co_return true;
        }
      }
      if (eof && queued == 0) {
        halfClose(to);
        co_return true;
      }
      if (moved) continue;
      ErrorCode ec;
      if (queued > 0)
        co_await to.async_wait(tcp::socket::wait_write,
                               net::redirect_error(net::use_awaitable, ec));
      else
        co_await from.async_wait(tcp::socket::wait_read,
                                 net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return true;  // closed by the other pump, the watchdog or stop()
      drained = false;
    }
  }

  // The pipe for splicing one direction, created once that direction has carried
  // kSpliceAfter bytes (so idle and chatty tunnels never pay two descriptors for it).
  int* pipeFor(bool up) {
    int* p = up ? pipe_up_ : pipe_down_;
    if (p[0] >= 0) return p;
    if (splice_off_ || (up ? bytes_up_ : bytes_down_) < kSpliceAfter) return nullptr;
    if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
      p[0] = p[1] = -1;
      return nullptr;
    }
    // A bigger pipe means fewer splice calls per megabyte (and more room to overlap reading
    // and writing); the kernel caps it at /proc/sys/fs/pipe-max-size and a failure of both
    // just keeps the default.
    if (::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(kPipeBytes)) < 0)
      ::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(kPipeFallbackBytes));
    return p;
  }

  void disableSplice() {
    splice_off_ = true;
    closePipes();
  }

  void closePipes() {
    for (int* p : {pipe_up_, pipe_down_}) {
      for (int i = 0; i < 2; ++i)
        if (p[i] >= 0) ::close(p[i]);
      p[0] = p[1] = -1;
    }
  }

  // Counts bytes against the tunnel and the workflow budget; ends the tunnel when over.
  bool count(bool up, std::size_t n) {
    bool ok;
    if (up) {
      bytes_up_ += n;
      ok = account_->addBytesOut(n, limits_);
    } else {
      bytes_down_ += n;
      ok = account_->addBytesIn(n, limits_);
    }
    if (!ok) {
      closeAll("limit_exceeded",
               up ? "workflow limit max_bytes_out reached" : "workflow limit max_bytes_in reached");
      log().info("tunnel {} ended: {}", event_.id, end_detail_);
    }
    return ok;
  }

  static net::awaitable<void> watchdog(std::shared_ptr<Tunnel> t) {
    const auto idle = t->ctx_->options.idle_timeout;
    for (;;) {
      t->timer_.expires_at(t->last_activity_ + idle);
      ErrorCode ec;
      co_await t->timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (ec || t->open_pumps_ == 0) co_return;
      if (std::chrono::steady_clock::now() - t->last_activity_ >= idle) {
        t->closeAll("idle_timeout", "no bytes either way for the idle timeout");
        co_return;
      }
    }
  }

  std::shared_ptr<Context> ctx_;
  std::shared_ptr<Account> account_;
  policy::EgressLimits limits_;
  tcp::socket client_;
  tcp::socket upstream_;
  net::steady_timer timer_;
  audit::ConnectionEvent event_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_activity_;
  std::uint64_t bytes_up_ = 0;
  std::uint64_t bytes_down_ = 0;
  int open_pumps_ = 2;
  int pipe_up_[2] = {-1, -1};
  int pipe_down_[2] = {-1, -1};
  bool splice_off_ = false;
  std::uint64_t live_id_ = 0;
  std::string end_reason_;
  std::string end_detail_;
};

}  // namespace

void startTunnel(std::shared_ptr<Context> ctx, std::shared_ptr<Account> account,
                 policy::EgressLimits limits, tcp::socket client, tcp::socket upstream,
                 std::string initial_up, audit::ConnectionEvent event) {
  auto t = std::make_shared<Tunnel>(std::move(ctx), std::move(account), limits, std::move(client),
                                    std::move(upstream), std::move(event));
  t->begin(std::move(initial_up));
}

}  // namespace sluice::proxy
