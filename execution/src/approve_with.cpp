// ApproveWith (sluice/execution/approve_with.hpp).
#include "sluice/execution/approve_with.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "sluice/base/clock.hpp"

extern char** environ;

namespace sluice::execution {

namespace {

// A pipe, or for the command's stdin a socket pair: written with send(MSG_NOSIGNAL), so a
// command that exits without reading it cannot kill sluice with SIGPIPE.
struct Pipe {
  int r = -1, w = -1;
  bool open(bool socket = false) {
    int fds[2];
    if (socket ? ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0
               : ::pipe2(fds, O_CLOEXEC) != 0)
      return false;
    r = fds[0];
    w = fds[1];
    return true;
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};

// The host as a log line shows it (escaped: the sandboxed code chose it).
std::string displayHost(const proxy::Approval& a) { return proxy::displayText(a.host, 256); }

}  // namespace

ApproverAnswer parseApproverAnswer(const std::string& out) {
  std::istringstream in(out);
  std::string first_line;
  std::getline(in, first_line);
  std::istringstream words(first_line);
  std::string verdict, scope, extra;
  words >> verdict >> scope >> extra;
  ApproverAnswer a;
  if ((verdict != "allow" && verdict != "deny") || !extra.empty()) return a;
  auto named = scope.empty() ? std::optional(proxy::Scope::kOnce) : proxy::parseScope(scope);
  if (!named) return a;
  a.valid = true;
  a.allow = verdict == "allow";
  a.scope = *named;
  return a;
}

class ApproveWith::Impl {
 public:
  Impl(std::shared_ptr<proxy::ApprovalDesk> desk, std::string command, std::string owner,
       unsigned parallel)
      : desk_(std::move(desk)), command_(std::move(command)) {
    for (unsigned i = 0; i < std::max(1u, parallel); ++i) workers_.emplace_back([this] { work(); });
    watch_ = desk_->watch(owner, [this](const proxy::Approval& a) {
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        queue_.push_back(a);
      }
      cv_.notify_one();
    });
  }

  ~Impl() {
    desk_->unwatch(watch_);
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (pid_t pid : running_) ::kill(-pid, SIGKILL);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  void work() {
    for (;;) {
      proxy::Approval a;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        a = std::move(queue_.front());
        queue_.pop_front();
      }
      decide(a);
    }
  }

  // Runs the command for `a` and answers the desk (a deny unless it clearly said allow).
  void decide(const proxy::Approval& a) {
    // Decided meanwhile without the command (settled by a `scope: execution` or `host` answer to
    // another approval, withdrawn because its client hung up, its execution ended): nothing to ask.
    if (!desk_->find(a.id)) return;
    std::string out;
    std::string why;
    bool settled = false;
    const bool ran = run(a, out, why, settled);
    if (settled) return;  // the command was stopped: the approval no longer waits
    ApproverAnswer ans = ran ? parseApproverAnswer(out) : ApproverAnswer{};
    if (ran && !ans.valid) why = "answered neither 'allow' nor 'deny'";
    if (!why.empty())
      spdlog::warn("--approve-with: approval {} ({}:{}) denied: {}", a.id, displayHost(a), a.port,
                   why);
    desk_->answer(a.id, ans.valid && ans.allow, ans.valid ? ans.scope : proxy::Scope::kOnce,
                  "approve-with");
  }

  // `settled`: the approval was decided some other way while the command ran (or expired, and
  // the desk's timer decides it), and the command was killed.
  bool run(const proxy::Approval& a, std::string& out, std::string& why, bool& settled) {
    Pipe in, outp;
    if (!in.open(true) || !outp.open()) {
      why = "pipe: " + std::string(std::strerror(errno));
      return false;
    }
    const pid_t pid = spawn(in, outp, why);
    if (pid < 0) return false;
    const std::string json = proxy::approvalJson(a) + "\n";
    // The command may not read its stdin at all: never block on it (a full pipe is its loss).
    (void)!::send(in.w, json.data(), json.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(in.w);
    in.w = -1;
    bool timed_out = readAnswer(a, outp.r, out, settled);
    if (timed_out || settled || out.size() >= 4096) ::kill(-pid, SIGKILL);
    const int status = reap(a, pid, timed_out);
    if (timed_out) {
      // Left to the desk, whose own timer refuses it as approval_timeout: answering deny here
      // would race that timer and record a timeout as an approver's refusal.
      spdlog::warn("--approve-with: approval {} ({}:{}): no answer before it expired", a.id,
                   displayHost(a), a.port);
      settled = true;
      return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      why = "the command failed (" +
            (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                               : "signal " + std::to_string(WTERMSIG(status))) +
            ")";
      return false;
    }
    return true;
  }

  // `/bin/sh -c CMD` with `in` as its stdin and `outp` as its stdout; -1 (and `why`) on failure.
  pid_t spawn(Pipe& in, Pipe& outp, std::string& why) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in.r, 0);
    posix_spawn_file_actions_adddup2(&fa, outp.w, 1);
    const char* argv[] = {"/bin/sh", "-c", command_.c_str(), nullptr};
    // Its own process group: a kill must reach what the shell started too (a script run by
    // /bin/sh -c is its child, and would otherwise outlive the kill, holding sluice's stderr).
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      why = "cannot start /bin/sh: " + std::string(std::strerror(rc));
      return -1;
    }
    {
      std::lock_guard lock(mu_);
      running_.push_back(pid);
    }
    ::close(in.r);
    in.r = -1;
    ::close(outp.w);
    outp.w = -1;
    return pid;
  }

  // The answer is the first line: read until it is complete (a child the command left behind
  // may hold its stdout open for ever). True when the approval expired first; `settled` when
  // it was decided some other way meanwhile.
  bool readAnswer(const proxy::Approval& a, int fd, std::string& out, bool& settled) {
    char buf[512];
    while (out.size() < 4096 && out.find('\n') == std::string::npos) {
      const std::int64_t left = a.expires_at_ms - base::nowMs();
      if (left <= 0) return true;
      pollfd p{fd, POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 100)));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        if (!desk_->find(a.id)) {
          settled = true;
          return false;
        }
        continue;
      }
      ssize_t got = ::read(fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      out.append(buf, static_cast<std::size_t>(got));
    }
    return false;
  }

  // Waits for the command to exit (killed once the approval expires; `timed_out` then set),
  // kills whatever it left in its group, and returns its wait status.
  int reap(const proxy::Approval& a, pid_t pid, bool& timed_out) {
    int status = 0;
    for (int delay_us = 100;;) {
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno != EINTR)) break;
      if (r == 0 && base::nowMs() >= a.expires_at_ms) {
        timed_out = true;
        ::kill(-pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      ::usleep(static_cast<useconds_t>(delay_us));
      delay_us = std::min(delay_us * 2, 10000);
    }
    ::kill(-pid, SIGKILL);  // whatever it left running in its group
    {
      std::lock_guard lock(mu_);
      std::erase(running_, pid);
    }
    return status;
  }

  std::shared_ptr<proxy::ApprovalDesk> desk_;
  std::string command_;
  std::uint64_t watch_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<proxy::Approval> queue_;
  std::vector<pid_t> running_;
  std::vector<std::thread> workers_;
};

ApproveWith::ApproveWith(std::shared_ptr<proxy::ApprovalDesk> desk, std::string command,
                         std::string owner, unsigned parallel)
    : impl_(std::make_unique<Impl>(std::move(desk), std::move(command), std::move(owner),
                                   parallel)) {}
ApproveWith::~ApproveWith() = default;

}  // namespace sluice::execution
