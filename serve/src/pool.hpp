// The warm pool (`--pool N`): per served workflow, N sandboxes built ahead of time (namespaces,
// mounts, cgroup, the proxy listener attached; nothing run in them yet). A one-shot run takes
// one, runs in it once and ends it; a new session takes one and keeps it until the session
// ends; a background loop builds the replacement, after the taker's first work is done (so
// that building it does not compete with that work for the CPU). A sandbox is never used twice,
// and a policy reload drops every sandbox built on the old policy.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine.hpp"
#include "sluice/base/loop.hpp"
#include "sluice/execution/sandbox.hpp"

namespace sluice::serve {

/// One prepared sandbox: a session sandbox opened on its workflow, whose id (its listeners')
/// becomes the id of whatever takes it: the execution id of a run, or the id of a session
/// ("sb-" + 16 hex digits: prepared before anyone knew which).
using Prepared = execution::Sandbox;

/// Opens a prepared sandbox of `w` whose listener (if any) is `id` (engine's proxy).
base::Result<std::unique_ptr<Prepared>> prepare(Engine& engine, const std::string& id,
                                                std::shared_ptr<const policy::Workflow> w);

class Pool {
 public:
  Pool(Engine& engine, std::size_t per_workflow);
  ~Pool();
  /// A prepared sandbox of workflow `w` (built on this very policy), or null when none is ready.
  /// The caller owns it from now on: nobody else is ever handed it. Its replacement is built
  /// when the caller retires it (a run), asks for it with replenish() (a session, after its
  /// first exec), or at the latest kRefillAfter from now.
  std::unique_ptr<Prepared> take(const policy::Workflow& w);
  /// Builds the replacements of taken sandboxes now.
  void replenish();
  static constexpr std::chrono::milliseconds kRefillAfter{250};
  /// Ends a used (or unusable) prepared sandbox on the pool's thread, off the caller's path.
  void retire(std::unique_ptr<Prepared> p);
  /// Drops every prepared sandbox (a reload: they hold the old policy) and refills.
  void reload();
  void stop();

 private:
  void refill();
  void endRetired();
  std::shared_ptr<const policy::Workflow> due();
  void drop(std::unique_ptr<Prepared> p);

  Engine& engine_;
  std::size_t per_workflow_;
  std::mutex mu_;
  bool stopping_ = false;
  std::map<std::string, std::deque<std::unique_ptr<Prepared>>> ready_;  // by workflow name
  std::vector<std::unique_ptr<Prepared>> retired_;                      // to end
  std::chrono::steady_clock::time_point last_take_{};
  std::size_t asked_ = 0;  // replacements asked for (retire, replenish, an empty pool, reload)
  std::chrono::steady_clock::time_point retry_after_{};  // a prepare failed: not before then
  base::BackgroundLoop filler_{"sluice-pool"};
};

}  // namespace sluice::serve
