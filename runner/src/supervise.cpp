// Supervising a running program (see supervise.hpp), and the process-wide stop request.
#include "supervise.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace sluice::runner {
namespace {

// requestStop(): the signal, a count of requests, and a self-pipe that wakes every supervising
// poll. A run stops when the count moved since it started (another run may have drained the
// pipe) or when it finds the pipe readable (a request made before it started: `sluice run`'s
// Ctrl-C during start-up).
std::atomic<int> g_stop_signal{0};
std::atomic<std::uint64_t> g_stop_requests{0};
int g_stop_pipe[2] = {-1, -1};

void onStopSignal(int sig) {
  g_stop_signal.store(sig);
  g_stop_requests.fetch_add(1);
  if (g_stop_pipe[1] >= 0) {
    int saved = errno;
    (void)!::write(g_stop_pipe[1], "s", 1);
    errno = saved;
  }
}

}  // namespace

void installStopHandlers() {
  if (g_stop_pipe[0] < 0 && ::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

void requestStop(int signal) { onStopSignal(signal); }

namespace detail {
namespace {

using namespace std::chrono_literals;

constexpr auto kNever = Clock::time_point::max();

class Supervisor {
 public:
  explicit Supervisor(const SuperviseSpec& s)
      : s_(s),
        deadline_(s.timeout.count() > 0 ? s.started + s.timeout : kNever),
        cpu_limit_us_(static_cast<std::uint64_t>(s.cpu_time.count()) * 1000),
        stop_requests_at_start_(g_stop_requests.load()) {
    stdin_open_ = s.stdin_w != nullptr && *s.stdin_w;
  }

  Supervised run() {
    while (out_open_ || err_open_ || report_open_) {
      if (!pollOnce()) break;
      checkClocks();
      // Once init has reported, every process is dead: the output pipes hit EOF immediately.
    }
    if (s_.stdin_w) s_.stdin_w->reset();
    return std::move(r_);
  }

 private:
  enum Slot { kOut, kErr, kErrPipe, kReport, kStdin, kGlobalStop, kStopFd, kSlots };

  bool pollOnce() {
    pollfd pfds[kSlots];
    int index[kSlots];
    nfds_t n = 0;
    auto add = [&](Slot slot, bool on, int fd, short events) {
      index[slot] = on && fd >= 0 ? static_cast<int>(n) : -1;
      if (index[slot] >= 0) pfds[n++] = {fd, events, 0};
    };
    const bool stopping = r_.stop != StopReason::kNone;
    add(kOut, out_open_, s_.out_r, POLLIN);
    add(kErr, err_open_, s_.errs_r, POLLIN);
    add(kErrPipe, errpipe_open_, s_.err_r, POLLIN);
    add(kReport, report_open_, s_.rep_r, POLLIN);
    add(kStdin, stdin_open_, stdin_open_ ? s_.stdin_w->get() : -1, POLLOUT);
    add(kGlobalStop, !stopping, g_stop_pipe[0], POLLIN);
    add(kStopFd, !stopping, s_.stop_fd, POLLIN);
    const int rc = ::poll(pfds, n, timeoutMs());
    if (rc < 0 && errno != EINTR) return false;
    auto ready = [&](Slot slot) { return rc > 0 && index[slot] >= 0 && pfds[index[slot]].revents; };
    if (ready(kOut)) drain(s_.out_r, r_.out, 1, out_open_);
    if (ready(kErr)) drain(s_.errs_r, r_.err, 2, err_open_);
    if (ready(kErrPipe)) readChildError();
    if (ready(kReport)) readReport();
    if (ready(kStdin)) feedStdin();
    if (ready(kGlobalStop)) {
      char buf[16];
      while (::read(g_stop_pipe[0], buf, sizeof buf) > 0) {
      }
      if (g_stop_signal.load() != 0) requestedStop(g_stop_signal.load());
    }
    if (ready(kStopFd)) requestedStop(SIGTERM);
    if (!stopping && g_stop_requests.load() != stop_requests_at_start_)
      requestedStop(g_stop_signal.load());
    return true;
  }

  int timeoutMs() const {
    auto wake = std::min({next_sample_, deadline_, kill_deadline_});
    return static_cast<int>(std::max<std::int64_t>(
        0, std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count()));
  }

  void drain(int fd, StreamCapture& cap, int stream, bool& open) {
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      open = false;
      return;
    }
    const std::uint64_t limit = s_.output_limit;
    cap.bytes += static_cast<std::uint64_t>(n);
    const std::uint64_t room = limit == 0                ? static_cast<std::uint64_t>(n)
                               : cap.text.size() < limit ? limit - cap.text.size()
                                                         : 0;
    const size_t take =
        static_cast<size_t>(std::min<std::uint64_t>(room, static_cast<std::uint64_t>(n)));
    cap.text.append(buf, take);
    if (take < static_cast<size_t>(n)) cap.truncated = true;
    if (s_.live && *s_.live) (*s_.live)(stream, std::string_view(buf, static_cast<size_t>(n)));
  }

  void readChildError() {
    ChildMessage m;
    const ssize_t got = ::read(s_.err_r, &m, sizeof m);
    if (got == static_cast<ssize_t>(sizeof m)) {
      base::Error e = setupError(
          std::string(m.step, strnlen(m.step, sizeof m.step)),
          std::string(m.step, strnlen(m.step, sizeof m.step)) + ": " + std::strerror(m.err));
      if (m.kind == ChildMessage::kExecFailed) {
        e.code = m.err == ENOENT ? base::Code::kCommandNotFound : base::Code::kCannotExecute;
        e.message = std::string(s_.program) + ": " + std::strerror(m.err);
      }
      e.sys_errno = m.err;
      r_.child_error = std::move(e);
    } else if (got <= 0 && !(got < 0 && errno == EINTR)) {
      errpipe_open_ = false;  // the program exec'd (or is gone)
      r_.exec_at = Clock::now();
    }
  }

  void readReport() {
    const ssize_t got = ::read(s_.rep_r, &r_.report, sizeof r_.report);
    if (got == static_cast<ssize_t>(sizeof r_.report)) r_.have_report = true;
    if (got == static_cast<ssize_t>(sizeof r_.report) || got == 0 || (got < 0 && errno != EINTR))
      report_open_ = false;
  }

  // Non-blocking: a program that does not read its stdin never holds up the relay.
  void feedStdin() {
    const std::string_view left = s_.stdin_data.substr(stdin_fed_);
    const ssize_t n = writeWithoutSigpipe(s_.stdin_w->get(), left.data(),
                                          std::min<std::size_t>(left.size(), 65536));
    if (n > 0) stdin_fed_ += static_cast<std::size_t>(n);
    if ((n < 0 && errno != EAGAIN && errno != EINTR) || stdin_fed_ == s_.stdin_data.size()) {
      s_.stdin_w->reset();  // EOF for the program (or it closed its end: EPIPE)
      stdin_open_ = false;
    }
  }

  void requestedStop(int signal) {
    if (r_.stop != StopReason::kNone) return;
    r_.stop_signal = signal;
    beginStop(StopReason::kRequest);
  }

  void beginStop(StopReason why) {
    if (r_.stop != StopReason::kNone) return;
    r_.stop = why;
    // init's handler SIGKILLs every other process of the namespace; the normal path then
    // reports. If init itself is wedged, SIGKILL it after a grace period.
    ::sigqueue(s_.init, SIGUSR1, sigval{.sival_int = s_.stop_seq});
    kill_deadline_ = Clock::now() + 2s;
  }

  void checkClocks() {
    const auto t = Clock::now();
    if (t >= deadline_ && report_open_) beginStop(StopReason::kTimeout);
    if (t >= kill_deadline_) {
      ::kill(s_.init, SIGKILL);
      kill_deadline_ = kNever;
    }
    if (t < next_sample_) return;
    next_sample_ = t + 100ms;
    const CgroupStats st = s_.cgroup ? s_.cgroup->stats() : CgroupStats{};
    r_.pids_sampled = std::max(r_.pids_sampled, st.pids_current);
    const std::uint64_t used =
        st.cpu_usage_us > s_.cpu_base_us ? st.cpu_usage_us - s_.cpu_base_us : 0;
    if (cpu_limit_us_ > 0 && used > cpu_limit_us_ && report_open_) beginStop(StopReason::kCpu);
  }

  const SuperviseSpec& s_;
  Supervised r_;
  const Clock::time_point deadline_;
  const std::uint64_t cpu_limit_us_;
  const std::uint64_t stop_requests_at_start_;
  Clock::time_point kill_deadline_ = kNever;
  Clock::time_point next_sample_ = Clock::now() + 50ms;
  bool out_open_ = true, err_open_ = true, errpipe_open_ = true, report_open_ = true;
  bool stdin_open_ = false;
  std::size_t stdin_fed_ = 0;
};

}  // namespace

Supervised supervise(const SuperviseSpec& spec) { return Supervisor(spec).run(); }

}  // namespace detail
}  // namespace sluice::runner
