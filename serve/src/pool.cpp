// The warm pool (pool.hpp).
#include "pool.hpp"

#include <spdlog/spdlog.h>

namespace sluice::serve {
namespace pol = sluice::policy;

base::Result<std::unique_ptr<Prepared>> prepare(Engine& engine, const std::string& id,
                                                std::shared_ptr<const pol::Workflow> w) {
  // With the workflow's shadow policy (learn mode is never pooled).
  auto open = engine.openOptions(std::move(w), sluice::execution::SandboxKind::kSession, id, false);
  if (!open) return std::unexpected(open.error());
  return sluice::execution::Sandbox::open(engine.services(), std::move(*open));
}

Pool::Pool(Engine& engine, std::size_t per_workflow)
    : engine_(engine), per_workflow_(per_workflow) {
  filler_.start([this] { refill(); }, kRefillAfter);
}

Pool::~Pool() { stop(); }

void Pool::stop() {
  std::map<std::string, std::deque<std::unique_ptr<Prepared>>> left;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !filler_.running()) return;
    stopping_ = true;
    left.swap(ready_);
  }
  filler_.stop();
  for (auto& [name, q] : left)
    for (auto& p : q) drop(std::move(p));
  std::vector<std::unique_ptr<Prepared>> retired;
  {
    std::lock_guard lock(mu_);
    retired.swap(retired_);
  }
  for (auto& p : retired) drop(std::move(p));
}

void Pool::drop(std::unique_ptr<Prepared> p) {
  if (p) p->close();
}

std::unique_ptr<Prepared> Pool::take(const pol::Workflow& w) {
  std::unique_ptr<Prepared> p;
  {
    std::lock_guard lock(mu_);
    auto it = ready_.find(w.name);
    // Only a sandbox built on this very policy (a reload may have raced).
    while (it != ready_.end() && !it->second.empty()) {
      auto candidate = std::move(it->second.front());
      it->second.pop_front();
      if (candidate->workflow().sha256 == w.sha256) {
        p = std::move(candidate);
        break;
      }
    }
    if (it != ready_.end())
      engine_.metrics().poolReady(w.name, static_cast<std::int64_t>(it->second.size()));
    // The replacement is built once the taker is done with its first work (a run's sandbox is
    // retired after the run answered; a session asks after its first exec), so that building it
    // does not compete with that work for the CPU (on a small machine it doubles a run's time).
    // An empty pool is refilled at once: nobody's work is waiting. A take that got one does
    // not wake the filler: it would find nothing due (the taker is not done yet) and would only
    // be a thread woken on the taker's path.
    last_take_ = std::chrono::steady_clock::now();
    if (!p) ++asked_;
  }
  if (!p) filler_.wake();
  return p;
}

void Pool::replenish() {
  {
    std::lock_guard lock(mu_);
    ++asked_;
  }
  filler_.wake();
}

void Pool::retire(std::unique_ptr<Prepared> p) {
  if (!p) return;
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      retired_.push_back(std::move(p));
      ++asked_;  // its taker is done: build the replacement now
      filler_.wake();
      return;
    }
  }
  drop(std::move(p));
}

void Pool::reload() {
  std::map<std::string, std::deque<std::unique_ptr<Prepared>>> old;
  {
    std::lock_guard lock(mu_);
    old.swap(ready_);
    for (const auto& [name, q] : old) {
      engine_.metrics().poolReady(name, 0);
      asked_ += q.size();  // replaced at once: nobody is using them
    }
  }
  filler_.wake();
  for (auto& [name, q] : old)
    for (auto& p : q) drop(std::move(p));
}

// One round of the filler (every kRefillAfter, and when woken): used sandboxes are ended
// first (their teardown is what a run did not wait for), then replacements are built while a
// workflow is short of its share.
void Pool::refill() {
  endRetired();
  while (auto want = due()) {
    auto made = prepare(engine_, Engine::newId("sb-"), want);
    if (!made) {
      spdlog::warn("pool: cannot prepare a sandbox for workflow '{}': {}", want->name,
                   made.error().text());
      std::lock_guard lock(mu_);
      retry_after_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      return;
    }
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        auto& q = ready_[want->name];
        q.push_back(std::move(*made));
        engine_.metrics().poolReady(want->name, static_cast<std::int64_t>(q.size()));
      }
    }
    if (*made) drop(std::move(*made));  // stopped meanwhile
    endRetired();
  }
}

void Pool::endRetired() {
  std::vector<std::unique_ptr<Prepared>> done;
  {
    std::lock_guard lock(mu_);
    done.swap(retired_);
  }
  for (auto& p : done) drop(std::move(p));
}

// The first workflow short of its share (sandbox.pool in the workflow, else --pool), if its
// replacement is due now.
std::shared_ptr<const pol::Workflow> Pool::due() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (stopping_ || now < retry_after_) return nullptr;
  std::shared_ptr<const pol::Workflow> want;
  for (const auto& info : engine_.workflows()) {
    auto w = engine_.workflow(info.name);
    const std::size_t share = w && w->sandbox.pool ? *w->sandbox.pool : per_workflow_;
    if (w && ready_[info.name].size() < share) {
      want = w;
      break;
    }
  }
  if (!want) {
    asked_ = 0;  // every share is full: no credit carries over to the next take
    return nullptr;
  }
  // Taken just now, and its taker not done yet: wait for it (retire(), replenish()), but not
  // for ever (a session may never exec): a later round builds it.
  if (asked_ == 0 && now - last_take_ < kRefillAfter) return nullptr;
  if (asked_ > 0) --asked_;
  return want;
}

}  // namespace sluice::serve
