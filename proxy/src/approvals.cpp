// ApprovalDesk (sluice/proxy/approvals.hpp): the pending approvals of one process, their
// timeouts (one desk thread), remembered `scope: execution` / `scope: host` answers (grants)
// and their audit rows.
#include "sluice/proxy/approvals.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "sluice/audit/event_text.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/hex.hpp"
#include "sluice/base/json.hpp"
#include "sluice/base/loop.hpp"

namespace sluice::proxy {

namespace {

using Clock = std::chrono::steady_clock;

std::string newApprovalId() {
  unsigned char b[8];
  std::size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) std::abort();  // getrandom cannot fail for 8 bytes once the pool is ready
    got += static_cast<std::size_t>(n);
  }
  return "ap-" + base::hexEncode(std::span<const std::uint8_t>(b, sizeof b));
}

// Remembered answers are filed under the rule, host and port they were given for; within that,
// a grant's selector says which later matches it covers (grantCovers).
std::string rememberKey(const Approval& a) {
  return a.rule + '\n' + a.host + '\n' + std::to_string(a.port);
}

// Selectors start with a space, which no HTTP method (a token) can hold.
constexpr std::string_view kAnyMethod = " any";  // a request's `scope: host`
constexpr std::string_view kTunnel = " tunnel";  // a tunnel's answer: the host and port whole

// The selector of a remembered answer to `a` with `scope` (not kOnce): what the approver was
// shown, widened only as far as the scope's word says.
std::string grantSelector(const Approval& a, Scope scope) {
  if (!a.method) return std::string(kTunnel);
  return scope == Scope::kHost ? std::string(kAnyMethod) : *a.method;
}

// Whether a grant with `selector` (same rule, host and port) covers `a`: a method grant only
// requests of that method, `host` requests of any method (not an opaque tunnel, which carries
// more than requests), a tunnel's grant everything to that host and port.
bool grantCovers(std::string_view selector, const Approval& a) {
  if (selector == kTunnel) return true;
  if (!a.method) return false;
  return selector == kAnyMethod || selector == *a.method;
}

std::string authorityOf(const Approval& a) {
  const bool v6 = a.host.find(':') != std::string::npos;
  return (v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.port);
}

// A bounded set that forgets its oldest members.
class RecentSet {
 public:
  explicit RecentSet(std::size_t cap) : cap_(cap) {}
  void add(const std::string& s) {
    if (!set_.insert(s).second) return;
    order_.push_back(s);
    if (order_.size() > cap_) {
      set_.erase(order_.front());
      order_.pop_front();
    }
  }
  bool contains(const std::string& s) const { return set_.count(s) != 0; }

 private:
  std::size_t cap_;
  std::deque<std::string> order_;
  std::unordered_set<std::string> set_;
};

}  // namespace

std::string displayText(std::string_view s, std::size_t max) {
  const std::size_t keep = max < 3 ? 0 : max - 3;  // room left before "..."
  std::string out;
  std::size_t cut = 0;  // the longest whole-unit prefix that fits in `keep`
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      base::appendHexByte(out, c);
    }
    if (out.size() <= keep) cut = out.size();
    // Cut at an escape's edge, never inside one (a lone backslash would read as another escape).
    if (max != 0 && out.size() > max) {
      out.resize(cut);
      return out + "...";
    }
  }
  return out;
}

std::string_view scopeName(Scope s) { return audit::textOf(s); }

std::optional<Scope> parseScope(std::string_view name) {
  for (Scope s : {Scope::kOnce, Scope::kExecution, Scope::kHost})
    if (scopeName(s) == name) return s;
  return std::nullopt;
}

ScopeCovers scopeCovers(const Approval& a) {
  // The host is canonical already (a name or an address); escaped all the same, as these lines
  // are shown to people as they are.
  const std::string where = displayText(authorityOf(a)) + " matched by rule " + displayText(a.rule);
  const std::string until = ", until the execution ends";
  if (!a.method) {
    const std::string whole = "every connection and request to " + where + until;
    return {"this connection only", whole, whole};
  }
  const std::string method = displayText(*a.method);
  return {"this " + method + " request only",
          method + " requests to " + where + ", any path" + until,
          "requests of every method to " + where + ", any path" + until};
}

std::string approvalJson(const Approval& a) {
  nlohmann::json j = {
      {"id", a.id},
      {"execution_id",
       a.execution_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.execution_id)},
      {"session_id", a.session_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.session_id)},
      {"workflow", a.workflow},
      {"caller", a.caller.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.caller)},
      {"rule", a.rule},
      {"host", a.host},
      {"port", a.port},
      {"method", a.method ? nlohmann::json(*a.method) : nlohmann::json(nullptr)},
      {"path", a.path ? nlohmann::json(*a.path) : nlohmann::json(nullptr)},
      {"asked_at", base::formatUtcMs(a.asked_at_ms)},
      {"expires_at", base::formatUtcMs(a.expires_at_ms)},
  };
  const ScopeCovers c = scopeCovers(a);
  j["covers"] = {{"once", c.once}, {"execution", c.execution}, {"host", c.host}};
  return base::dumpJson(j);
}

class ApprovalDesk::Impl {
 public:
  explicit Impl(std::shared_ptr<audit::EventSink> sink) : sink_(std::move(sink)) {
    // The desk sleeps until the earliest deadline (none: until an ask wakes it), so an
    // unanswered approval is refused at its deadline and an idle desk never wakes.
    loop_.startScheduled([this] { return expire(); });
  }

  ~Impl() {
    std::vector<Resolved> left;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (auto& [id, p] : pending_)
        left.push_back(
            take(p, ApprovalOutcome{false, "approval_unavailable", "shutdown"}, Scope::kOnce));
      pending_.clear();
    }
    loop_.stop();  // decisions already queued are delivered first
    for (auto& r : left) finish(r);
  }

  Approval ask(Approval a, std::chrono::milliseconds timeout,
               std::function<void(ApprovalOutcome)> done) {
    a.id = newApprovalId();
    a.asked_at_ms = base::nowMs();
    a.expires_at_ms = a.asked_at_ms + timeout.count();
    const std::string owner = a.execution_id;
    std::vector<std::pair<std::uint64_t, Watcher>> to_tell;
    {
      std::unique_lock lock(mu_);
      if (auto at = attributions_.find(owner); at != attributions_.end()) {
        if (!at->second.execution_id.empty()) a.execution_id = at->second.execution_id;
        if (!at->second.session_id.empty()) a.session_id = at->second.session_id;
        if (!at->second.caller.empty()) a.caller = at->second.caller;
      }
      // Decided at once, on the desk thread: covered by an earlier `scope: execution` or
      // `scope: host` answer, or nobody can answer any more.
      auto decideNow = [&](Resolved res) {
        lock.unlock();
        later(std::move(res));
        return a;
      };
      if (const Remembered* m = grantFor(owner, a))
        return decideNow(takeCovered(Pending{a, owner, {}, std::move(done)}, *m));
      if (stopping_ || ended_.contains(owner) || ended_.contains(a.execution_id)) {
        return decideNow(
            take(Pending{a, owner, {}, std::move(done)},
                 ApprovalOutcome{false, stopping_ ? "approval_unavailable" : "execution_ended",
                                 "sluice"},
                 Scope::kOnce));
      }
      pending_.emplace(a.id, Pending{a, owner, Clock::now() + timeout, std::move(done)});
      for (const auto& [h, w] : watchers_)
        if (w.first.empty() || w.first == owner || w.first == a.execution_id)
          to_tell.emplace_back(h, w.second);
    }
    loop_.wake();  // its deadline may be the earliest now
    for (auto& [h, w] : to_tell) w(a);
    return a;
  }

  AnswerStatus answer(const std::string& id, bool allow, Scope scope,
                      const std::string& decided_by) {
    std::vector<Resolved> decided;  // this one first, then those its answer covers
    {
      std::lock_guard lock(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end())
        return gone_.contains(id) ? AnswerStatus::kGone : AnswerStatus::kNotFound;
      const std::string owner = it->second.owner;
      const Approval asked = it->second.a;
      decided.push_back(take(std::move(it->second),
                             ApprovalOutcome{allow, allow ? "" : "approval_denied", decided_by},
                             scope));
      pending_.erase(it);
      if (scope != Scope::kOnce && !ended_.contains(owner)) {
        const std::string selector = grantSelector(asked, scope);
        const Remembered& m = remembered_[owner][rememberKey(asked)][selector] =
            Remembered{allow, id, decided_by, scope, ++grants_};
        for (auto& r : settleCovered(owner, asked, selector, m)) decided.push_back(std::move(r));
      }
    }
    for (auto& r : decided) finish(r);
    return AnswerStatus::kAnswered;
  }

  void cancel(const std::string& id) {
    Resolved r;
    {
      std::lock_guard lock(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      r = take(std::move(it->second), ApprovalOutcome{false, "closed", "sluice"}, Scope::kOnce);
      pending_.erase(it);
    }
    finish(r);
  }

  std::vector<Approval> pending() const {
    std::lock_guard lock(mu_);
    std::vector<Approval> out;
    out.reserve(pending_.size());
    for (const auto& [id, p] : pending_) out.push_back(p.a);
    std::sort(out.begin(), out.end(), [](const Approval& x, const Approval& y) {
      return x.asked_at_ms != y.asked_at_ms ? x.asked_at_ms < y.asked_at_ms : x.id < y.id;
    });
    return out;
  }

  std::optional<Approval> find(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return std::nullopt;
    return it->second.a;
  }

  std::uint64_t watch(const std::string& execution_id, Watcher fn) {
    std::lock_guard lock(mu_);
    watchers_[++next_watch_] = {execution_id, std::move(fn)};
    return next_watch_;
  }

  void attribute(const std::string& owner, Attribution a) {
    std::lock_guard lock(mu_);
    attributions_[owner] = std::move(a);
  }

  void unwatch(std::uint64_t h) {
    std::lock_guard lock(mu_);
    watchers_.erase(h);
  }

  void endExecution(const std::string& execution_id) {
    std::vector<Resolved> left;
    {
      std::lock_guard lock(mu_);
      ended_.add(execution_id);
      remembered_.erase(execution_id);
      attributions_.erase(execution_id);
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.owner != execution_id && it->second.a.execution_id != execution_id) {
          ++it;
          continue;
        }
        left.push_back(take(std::move(it->second),
                            ApprovalOutcome{false, "execution_ended", "sluice"}, Scope::kOnce));
        it = pending_.erase(it);
      }
    }
    for (auto& r : left) finish(r);
  }

 private:
  struct Pending {
    Approval a;
    std::string owner;  // the listener's execution id (a.execution_id may be attributed)
    Clock::time_point deadline;
    std::function<void(ApprovalOutcome)> done;
  };
  // A remembered `scope: execution` or `scope: host` answer: a grant.
  struct Remembered {
    bool allow = false;
    std::string approval_id;
    std::string decided_by;
    Scope scope = Scope::kExecution;
    std::uint64_t order = 0;  // later answers decide over earlier ones that also cover
  };
  // selector (grantSelector) -> grant, for one rule, host and port.
  using Grants = std::map<std::string, Remembered, std::less<>>;
  // A decided approval: its audit row, then its waiter's callback.
  struct Resolved {
    audit::ApprovalEvent event;
    ApprovalOutcome outcome;
    std::function<void(ApprovalOutcome)> done;
  };

  // Under mu_: marks `p` decided and makes its row.
  Resolved take(Pending p, ApprovalOutcome o, Scope scope) {
    gone_.add(p.a.id);
    audit::ApprovalEvent ev;
    ev.id = p.a.id;
    ev.execution_id = p.a.execution_id;
    ev.session_id = p.a.session_id;
    ev.workflow = p.a.workflow;
    ev.caller = p.a.caller;
    ev.rule_id = p.a.rule;
    ev.host = p.a.host;
    ev.port = p.a.port;
    ev.method = p.a.method.value_or("");
    ev.path = p.a.path.value_or("");
    ev.decision = o.allowed ? audit::Decision::kAllow : audit::Decision::kDeny;
    ev.reason = o.reason;
    ev.scope = scope;
    ev.decided_by = o.decided_by;
    ev.asked_at_ms = p.a.asked_at_ms;
    ev.decided_at_ms = base::nowMs();
    return Resolved{std::move(ev), std::move(o), std::move(p.done)};
  }

  // Under mu_: the latest remembered answer of `owner` that covers `a`, or null.
  const Remembered* grantFor(const std::string& owner, const Approval& a) const {
    auto ex = remembered_.find(owner);
    if (ex == remembered_.end()) return nullptr;
    auto grants = ex->second.find(rememberKey(a));
    if (grants == ex->second.end()) return nullptr;
    const Remembered* best = nullptr;
    for (const auto& [selector, m] : grants->second)
      if (grantCovers(selector, a) && (!best || m.order > best->order)) best = &m;
    return best;
  }

  // Under mu_: `p` decided by the remembered answer `m` (its row names that answer and its
  // scope: "scope:host of ap-… (uid:0)").
  Resolved takeCovered(Pending p, const Remembered& m) {
    Resolved r =
        take(std::move(p), ApprovalOutcome{m.allow, m.allow ? "" : "approval_denied", m.decided_by},
             m.scope);
    r.event.decided_by = "scope:" + std::string(scopeName(m.scope)) + " of " + m.approval_id +
                         " (" + m.decided_by + ")";
    r.outcome.decided_by = r.event.decided_by;  // the refusal or the connection row names it too
    return r;
  }

  // Under mu_: a remembered answer also decides what is already pending that it would have
  // covered had it been asked later (same owner, rule, host and port, and what the selector
  // covers): an agent that opened several connections to one host at once is not left with
  // all but one waiting.
  std::vector<Resolved> settleCovered(const std::string& owner, const Approval& asked,
                                      const std::string& selector, const Remembered& m) {
    const std::string key = rememberKey(asked);
    std::vector<Resolved> out;
    for (auto it = pending_.begin(); it != pending_.end();) {
      const Approval& other = it->second.a;
      if (it->second.owner != owner || rememberKey(other) != key || !grantCovers(selector, other)) {
        ++it;
        continue;
      }
      out.push_back(takeCovered(std::move(it->second), m));
      it = pending_.erase(it);
    }
    return out;
  }

  // Outside mu_: the row first (so it is queued before the connection's own row), then the
  // waiter.
  void finish(Resolved& r) {
    if (sink_) sink_->recordApproval(r.event);
    if (r.done) {
      auto done = std::move(r.done);
      done(std::move(r.outcome));
    }
  }

  // On the desk thread, after what was queued before it: the row, then the waiter.
  void later(Resolved r) {
    auto job = std::make_shared<Resolved>(std::move(r));
    if (!loop_.post([this, job] { finish(*job); })) finish(*job);  // the desk is stopping
  }

  // The desk thread's tick: refuses what waited past its deadline; returns the next deadline.
  Clock::time_point expire() {
    std::vector<Resolved> expired;
    Clock::time_point next = Clock::time_point::max();
    {
      std::lock_guard lock(mu_);
      const auto now = Clock::now();
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.deadline > now) {
          next = std::min(next, it->second.deadline);
          ++it;
          continue;
        }
        expired.push_back(take(std::move(it->second),
                               ApprovalOutcome{false, "approval_timeout", "timeout"},
                               Scope::kOnce));
        it = pending_.erase(it);
      }
    }
    for (auto& r : expired) finish(r);
    return next;
  }

  std::shared_ptr<audit::EventSink> sink_;
  mutable std::mutex mu_;
  bool stopping_ = false;
  std::map<std::string, Pending> pending_;
  // owner -> rememberKey -> grants.
  std::unordered_map<std::string, std::unordered_map<std::string, Grants>> remembered_;
  std::uint64_t grants_ = 0;
  // Bounded memory for a daemon that runs for months: answering an approval decided more than
  // 4096 approvals ago is 404, not 409; an execution is refused new asks (execution_ended) only
  // while it is among the last 256 ended (the window before its connections are closed).
  RecentSet gone_{4096};  // decided approvals: answering one again is 409
  RecentSet ended_{256};  // ended executions: their approvals are refused at once
  std::map<std::uint64_t, std::pair<std::string, Watcher>> watchers_;
  std::unordered_map<std::string, Attribution> attributions_;
  std::uint64_t next_watch_ = 0;
  // The desk thread: decisions are delivered on it in order, and expiry is its tick. Last, so
  // it stops before what it touches goes.
  base::BackgroundLoop loop_{"approvals"};
};

ApprovalDesk::ApprovalDesk(std::shared_ptr<audit::EventSink> sink)
    : impl_(std::make_unique<Impl>(std::move(sink))) {}
ApprovalDesk::~ApprovalDesk() = default;

Approval ApprovalDesk::ask(Approval a, std::chrono::milliseconds timeout,
                           std::function<void(ApprovalOutcome)> done) {
  return impl_->ask(std::move(a), timeout, std::move(done));
}
AnswerStatus ApprovalDesk::answer(const std::string& id, bool allow, Scope scope,
                                  const std::string& decided_by) {
  return impl_->answer(id, allow, scope, decided_by);
}
std::vector<Approval> ApprovalDesk::pending() const { return impl_->pending(); }
std::optional<Approval> ApprovalDesk::find(const std::string& id) const { return impl_->find(id); }
std::uint64_t ApprovalDesk::watch(const std::string& execution_id, Watcher fn) {
  return impl_->watch(execution_id, std::move(fn));
}
void ApprovalDesk::unwatch(std::uint64_t handle) { impl_->unwatch(handle); }
void ApprovalDesk::cancel(const std::string& id) { impl_->cancel(id); }
void ApprovalDesk::attribute(const std::string& owner, Attribution a) {
  impl_->attribute(owner, std::move(a));
}
void ApprovalDesk::endExecution(const std::string& execution_id) {
  impl_->endExecution(execution_id);
}

}  // namespace sluice::proxy
