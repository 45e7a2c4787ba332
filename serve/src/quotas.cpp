// Quota and the default shares (quotas.hpp).
#include "quotas.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace sluice::serve {

Shares sharesFor(const ServeOptions& o, std::size_t known_callers) {
  // Half of the total each: two callers both fit, and neither can take all.
  auto share = [&](std::size_t asked, std::size_t total) {
    if (asked > 0) return std::min(asked, total);
    return known_callers >= 2 ? std::max<std::size_t>(1, total / 2) : total;
  };
  Shares s;
  s.sessions = o.max_sessions;
  s.sessions_per_caller = share(o.max_sessions_per_caller, o.max_sessions);
  s.runs = o.max_runs;
  s.runs_per_caller = share(o.max_runs_per_caller, o.max_runs);
  s.max_session_ttl = o.max_session_ttl;
  return s;
}

struct Quota::State {
  std::size_t total = 0, per_caller = 0;
  std::string what, flag, reason;
  mutable std::mutex mu;
  std::size_t held = 0;                        // guarded by mu
  std::map<std::string, std::size_t> callers;  // guarded by mu; no zero entries
};

unsigned retryAfter(std::string_view reason) {
  if (reason.starts_with("too_many_runs")) return kRunRetryAfter;
  if (reason.starts_with("too_many_sessions")) return kSessionRetryAfter;
  return 0;
}

Quota::Quota(std::size_t total, std::size_t per_caller, std::string what, std::string flag,
             std::string reason)
    : state_(std::make_shared<State>()) {
  state_->total = total;
  state_->per_caller = per_caller;
  state_->what = std::move(what);
  state_->flag = std::move(flag);
  state_->reason = std::move(reason);
}

base::Result<std::shared_ptr<void>> Quota::acquire(const std::string& caller) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  auto full = [&](const std::string& reason, const std::string& message) {
    base::Error e(base::Code::kResourceExhausted, message);
    e.reason = reason;
    return std::unexpected(std::move(e));
  };
  if (s.held >= s.total)
    return full(s.reason,
                "at most " + std::to_string(s.total) + " " + s.what + " (" + s.flag + ")");
  auto it = s.callers.find(caller);
  const std::size_t mine = it == s.callers.end() ? 0 : it->second;
  if (mine >= s.per_caller)
    return full(s.reason + "_for_caller", caller + " has " + std::to_string(mine) + " " + s.what +
                                              ", its share (" + s.flag + "-per-caller " +
                                              std::to_string(s.per_caller) + ")");
  ++s.held;
  ++s.callers[caller];
  // The hold gives its unit back when its last copy goes, whichever thread that is on.
  return std::shared_ptr<void>(nullptr, [st = state_, caller](void*) {
    std::lock_guard lock(st->mu);
    --st->held;
    if (auto c = st->callers.find(caller); c != st->callers.end() && --c->second == 0)
      st->callers.erase(c);
  });
}

std::size_t Quota::held() const {
  std::lock_guard lock(state_->mu);
  return state_->held;
}

}  // namespace sluice::serve
