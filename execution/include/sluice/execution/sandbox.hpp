// One execution, the same for every surface: `sluice run`, `sluice serve`'s runs (cold and
// pooled) and session execs, and `sluice mcp`. How any execution runs:
//
//   0. The edge parses what it was given (CLI flags, API JSON, MCP arguments) into a typed
//      Command; nothing below sees JSON or flag text.
//   1. Sandbox::open() prepares the workflow: its limits, a placeholder (VAR=random token) per
//      `inject.placeholder_env` rule, the compiled matcher, the listener identity under the
//      sandbox's id, the CA bundle when it inspects TLS, the policy's row in the audit store. A
//      session sandbox (a session's, or a pooled one) is built now and its proxy listeners,
//      DNS sockets and blocked-packet log adopted by the proxy.
//   2. Sandbox::exec(Command) runs one command: its environment is checked (no placeholder's
//      variable, none of the runner's fixed ones) and its limits may only tighten; approvals
//      it raises are attributed to it; the program starts only once the audit store is
//      healthy; a one-shot sandbox is built around it (its listeners adopted as the runner
//      hands them over). When it ends: its pending approvals are refused, its traffic closed
//      and counted, its receipt built (one that never ran still gets one: exit 125/126/127)
//      and durably committed.
//   3. Sandbox::close() closes the execution in the proxy and the approval desk and ends a
//      session's sandbox: nothing is left behind. The destructor closes too.
//
// One-shot runs are open + exec + close; sessions keep one open across execs; pooled runs take
// one the pool opened and run in it once (runOnce).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sluice/audit/store.hpp"
#include "sluice/base/error.hpp"
#include "sluice/policy/workflow.hpp"
#include "sluice/proxy/approvals.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/runner/limits.hpp"
#include "sluice/runner/receipt.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/runner/session.hpp"

namespace sluice::policy {
class Matcher;
}

namespace sluice::execution {

/// What a process provides once, to every execution it runs.
struct Services {
  /// Adopts every sandbox's listeners, DNS and blocked-packet log. May be null until
  /// `start_network` has made it.
  proxy::Proxy* proxy = nullptr;
  /// Policy rows and the durable commit of every receipt; null: nothing is recorded.
  std::shared_ptr<audit::Store> store;
  /// Where ask-rule matches wait for an approver; null: they are refused at once.
  std::shared_ptr<proxy::ApprovalDesk> approvals;
  /// `${secret:NAME}` values for the proxy's injections (only the proxy reads them).
  std::shared_ptr<const policy::SecretStore> secrets;
  /// The CA a TLS-inspecting sandbox trusts (its bundle is placed in the sandbox).
  std::shared_ptr<proxy::CertificateAuthority> ca;
  /// A sandbox whose namespaces are being built ahead of time (a zygote's), or null.
  std::function<runner::PreparedSandboxPtr()> prepared;
  /// Called when a sandbox's first listener arrives, before it is adopted: for services made
  /// late (`sluice run` reads its secrets and starts its proxy only once the sandbox's init
  /// exists). Its error is the run's setup failure, at step `where`, before the program starts.
  std::function<base::Result<void>()> start_network;
  /// The proxy serves this execution alone: it is stopped once the execution is closed, so
  /// that every connection row is queued before the execution's own.
  bool proxy_per_execution = false;
  /// A run refused because the audit store failed is still answered with its receipt, not
  /// recorded (`sluice run`); otherwise the failed commit is the answer (`sluice serve`).
  bool answer_unrecorded = false;
  /// Called after each receipt's commit (serve counts runs).
  std::function<void()> on_committed;
};

/// One command, typed. Built at the edge; limits are the caller's overrides (they may only
/// tighten the workflow's).
struct Command {
  std::vector<std::string> argv;
  std::vector<std::string> env;  ///< K=V added to the sandbox's environment
  std::string stdin_data;
  std::vector<runner::SandboxFile> files;  ///< placed under /work, /tmp or /output first
  std::vector<runner::Input> inputs;       ///< read-only under /input (one-shot only)
  std::filesystem::path output_dir;        ///< where /output is copied (one-shot only)
  std::optional<std::string> cwd;          ///< session execs; none: /work
  runner::LimitOverrides limits;           ///< a session's exec: only `timeout`
};

/// Per exec: who asked, and what the surface hooks into the run.
struct ExecIo {
  std::string caller;  ///< recorded in the receipt when `record_caller`
  bool record_caller = false;
  runner::OutputSink live;  ///< the program's output as it arrives
  int stop_fd = -1;         ///< readable: stop this exec
  /// Just before the program may start (after the sandbox is built): `sluice run` waits for
  /// its audit store; serve counts the start. Its error is a setup failure.
  runner::StartGate before_start;
};

/// A committed receipt and the result it describes.
struct Receipt {
  nlohmann::json json;  ///< with "hash" once committed
  runner::RunResult result;
  /// Set when the command never ran (a setup step failed, or it cannot start).
  std::optional<base::Error> not_run;
};

/// How the sandbox lives: built around one command, or built at open() for many.
enum class SandboxKind : std::uint8_t { kOneShot, kSession };

struct OpenOptions {
  std::shared_ptr<const policy::Workflow> workflow;
  SandboxKind kind = SandboxKind::kOneShot;
  std::string id;  ///< its listeners' id (a one-shot run's execution id); "" = a fresh one
  /// A candidate policy decided alongside (`--shadow-policy`; proxy::ListenerIdentity::shadow).
  std::shared_ptr<const policy::Matcher> shadow = nullptr;
  /// Learn mode (`sluice run --learn`; proxy::ListenerIdentity::learn): receipts say so.
  bool learn = false;
};

class Sandbox {
 public:
  /// Prepares `o.workflow` (and builds a session sandbox). `services` must outlive it.
  static base::Result<std::unique_ptr<Sandbox>> open(Services& services, OpenOptions o);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  /// Checks `cmd` against this sandbox without running it: environment (`where`
  /// "env") and limits (`where` "limits"). exec() checks it too.
  base::Result<void> check(const Command& cmd) const;
  /// Runs `cmd` (once for a one-shot sandbox, any number of times in a session) and returns
  /// its committed receipt. Errors: `cmd` is refused (kInvalidArgument, nothing ran), the
  /// session has ended (kNotFound), the commit failed.
  base::Result<Receipt> exec(const Command& cmd, const ExecIo& io = {});
  /// Runs `cmd` as the one execution of a session sandbox (a pooled run): under the sandbox's
  /// id, its /output the receipt's artifacts. The sandbox is spent afterwards: close() it.
  base::Result<Receipt> runOnce(const Command& cmd, const ExecIo& io = {});
  /// Ends it: pending approvals refused, its traffic closed in the proxy, a session's sandbox
  /// ended. Idempotent.
  void close();

  const std::string& id() const;
  /// The execution id the next exec() will record (a one-shot's: id()).
  const std::string& nextExecutionId() const;
  const policy::Workflow& workflow() const;
  const std::shared_ptr<const policy::Workflow>& workflowShared() const;
  /// The policy in force: the workflow's compiled matcher (compiled now when the sandbox has no
  /// network), or the one a live update (replacePolicy) put in its place; the one the proxy
  /// decides with, what a caller explaining a refusal asks. workflow() stays the original.
  std::shared_ptr<const policy::Matcher> matcher() const;
  /// A live update of the sandbox's policy (proxy::Proxy::replacePolicy under its id): the new
  /// generation, and matcher() returns `next` from now on. kConflict without proxied network.
  base::Result<std::uint64_t> replacePolicy(std::shared_ptr<const policy::Matcher> next);
  bool networkProxy() const;
  /// A session's limits (the workflow's); a one-shot's before the command's overrides.
  const runner::Limits& limits() const;
  /// The session's sandbox, for file operations; null for a one-shot one.
  runner::SandboxSession* session();
  /// The proxy's counters for the sandbox's listeners so far.
  proxy::Stats networkStats() const;

  struct State;

 private:
  explicit Sandbox(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

/// The upstream CA files a proxy is to trust: each must be a readable regular file
/// (kInvalidArgument naming it, `where` "upstream CA").
base::Result<void> checkUpstreamCas(const std::vector<std::string>& files);

/// Whether sandboxes get full isolation (root with cgroups). As root without it: an error
/// (`where` "sandbox"). Unprivileged: `warning` says what is not enforced (a user namespace
/// without cgroups), and sandboxes still run.
base::Result<bool> checkIsolation(std::string* warning);

}  // namespace sluice::execution
