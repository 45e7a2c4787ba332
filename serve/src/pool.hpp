// The warm pool (`--pool N`): per served workflow, N sandboxes built ahead of time (namespaces,
// mounts, cgroup, the proxy listener attached; nothing run in them yet). A one-shot run takes
// one, runs in it once and ends it; a new session takes one and keeps it until the session
// ends; a background thread builds the replacement. A sandbox is never used twice, and a policy
// reload drops every sandbox built on the old policy.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine.hpp"
#include "sluice/runner/session.hpp"

namespace sluice::serve {

/// One prepared sandbox and what it was built with.
struct Prepared {
  // Its listener's id, so the id of whatever takes it: the execution id of a run, or the id of
  // a session ("sb-" + 16 hex digits: prepared before anyone knew which).
  std::string id;
  std::shared_ptr<const policy::Workflow> workflow;
  std::vector<proxy::Placeholder> placeholders;
  runner::Limits limits;
  std::unique_ptr<runner::SandboxSession> box;
};

/// Builds a prepared sandbox of `w` whose listener (if any) is `id` (engine's proxy).
std::expected<std::unique_ptr<Prepared>, runner::SetupError> prepare(
    Engine& engine, const std::string& id, std::shared_ptr<const policy::Workflow> w);

class Pool {
 public:
  Pool(Engine& engine, std::size_t per_workflow);
  ~Pool();
  /// When the filler builds the replacement of a taken sandbox: after a run, once it is
  /// retired (building it then does not compete with the run for the CPU); for a session, at
  /// once (the session keeps its sandbox until it ends).
  enum class Refill { kAfterRetire, kNow };
  /// A prepared sandbox of workflow `w` (built on this very policy), or null when none is ready.
  /// The caller owns it from now on: nobody else is ever handed it.
  std::unique_ptr<Prepared> take(const policy::Workflow& w, Refill refill = Refill::kAfterRetire);
  /// Ends a used (or unusable) prepared sandbox on the pool's thread, off the caller's path.
  void retire(std::unique_ptr<Prepared> p);
  /// Drops every prepared sandbox (a reload: they hold the old policy) and refills.
  void reload();
  void stop();

 private:
  void refill();
  void drop(std::unique_ptr<Prepared> p);

  Engine& engine_;
  std::size_t per_workflow_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, std::deque<std::unique_ptr<Prepared>>> ready_;  // by workflow name
  std::vector<std::unique_ptr<Prepared>> retired_;                      // to end
  std::thread filler_;
};

}  // namespace sluice::serve
