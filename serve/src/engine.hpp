// What the daemon runs executions with: the policies, one proxy shared by every sandbox (a
// listener per execution), the audit store (behind the EventTee), the secrets and the CA. An
// execution is one runner::runSandboxed on the calling thread, wired policy -> runner ->
// proxy -> receipt -> audit, with the caller recorded in the receipt.
#pragma once

#include <atomic>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "auth.hpp"
#include "event_tee.hpp"
#include "metrics.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/execution/sandbox.hpp"
#include "sluice/policy/workflow.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/runner/limits.hpp"
#include "sluice/runner/receipt.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/serve/otlp.hpp"
#include "sluice/serve/server.hpp"

namespace sluice::serve {

/// An error of the API as serve's functions return it: `code` gives the HTTP status
/// (base::httpStatus), `reason` the API's word for it (schemas/api.v1.yaml `Error.reason`).
base::Error apiFail(base::Code code, std::string reason, std::string message);

/// How the HTTP edge answers an error (api.cpp, admission.cpp): status, reason word, message,
/// Retry-After. Built only by apiError() below, or by the edge itself for what no code names
/// (415 for a body that is not JSON, 405).
struct ApiError {
  int status = 400;
  std::string reason = "bad_request";
  std::string message;
  std::string detail;
  unsigned retry_after = 0;  // seconds, sent as Retry-After (429)
};

/// The one rendering of a base::Error for the API: the status from base::httpStatus, the
/// error's reason or the API's word for the status (bad_request, not_found, ...; 500 internal
/// for a status the API has no word for), the error's text, and a quota's Retry-After.
ApiError apiError(const base::Error& e);

/// A run as the API asks for it (POST /v1/runs): which workflow, and the typed command.
struct RunRequest {
  std::string workflow;
  execution::Command command;
  bool learn = false;  ///< "learn": true (refused unless ServeOptions::allow_learn)
};

/// Parses `key` into `out` if it is a field a run and a session exec share (argv, stdin, env):
/// true; false for another key.
base::Result<bool> parseCommandField(const std::string& key, const nlohmann::json& v,
                                     execution::Command& out);

/// Parses a RunRequest from the body of POST /v1/runs (field errors name the field).
base::Result<RunRequest> parseRunRequest(const nlohmann::json& body);

/// Parses the command of POST /v1/sessions/{id}/exec (argv, stdin, env, cwd, timeout).
base::Result<execution::Command> parseExecRequest(const nlohmann::json& body);

struct WorkflowInfo {
  std::string name;
  std::string description;
  std::string policy_sha256;
};

class Pool;

class Engine {
 public:
  static std::expected<std::unique_ptr<Engine>, std::string> create(const ServeOptions& options,
                                                                    Metrics& metrics);
  ~Engine();

  std::expected<void, std::string> reload();
  std::vector<WorkflowInfo> workflows() const;

  /// Runs `request` to completion on the calling thread (which must outlive the run). `lines`
  /// gets NDJSON events as they happen (output, network decisions); `stop_fd`, when readable,
  /// stops the run. Returns the receipt, committed to the audit store. What may wait until the
  /// answer is out (the teardown of a warm-pool sandbox, so that it does not compete with the
  /// answer for the CPU) is left in `after_answer` when given: it runs once that is released.
  base::Result<nlohmann::json> run(const Caller& caller, const RunRequest& request,
                                   const std::function<void(std::string)>& lines, int stop_fd,
                                   std::shared_ptr<void>* after_answer = nullptr);

  /// The stored receipt of execution `id`, if `caller` owns it.
  std::optional<nlohmann::json> execution(const Caller& caller, const std::string& id);

  /// Runs of workflows with prepared sandboxes take one (pool.hpp); null: always cold.
  void setPool(Pool* pool) { pool_ = pool; }
  /// The warm pool (null without one): new sessions take their sandbox from it too.
  Pool* pool() const { return pool_; }

  std::uint64_t auditQueueDepth() const;
  /// The OpenTelemetry exporter's counters for /metrics (none without --otlp-endpoint).
  std::vector<CounterPoint> otlpCounters() const {
    return otlp_ ? otlpCounterPoints(*otlp_) : std::vector<CounterPoint>{};
  }
  /// Flushes the audit store (drain).
  void flush();

  // For sessions (sessions.hpp): the pieces an execution is wired with.
  std::shared_ptr<const policy::Workflow> workflow(const std::string& name) const;
  /// How a sandbox of workflow `name` opens: its shadow policy (--shadow-policy-dir) and
  /// learn mode. An error (403 learn_not_allowed) when learn is asked for without
  /// --allow-learn.
  base::Result<execution::OpenOptions> openOptions(std::shared_ptr<const policy::Workflow> w,
                                                   execution::SandboxKind kind, std::string id,
                                                   bool learn) const;
  proxy::Proxy& proxy() { return *proxy_; }
  EventTee& tee() { return *tee_; }
  /// Where ask-rule matches of every sandbox wait for an approver (docs/approvals.md).
  proxy::ApprovalDesk& approvals() { return *approvals_; }
  const std::shared_ptr<proxy::ApprovalDesk>& approvalsShared() const { return approvals_; }
  audit::Store& store() { return *store_; }
  Metrics& metrics() { return metrics_; }
  const std::shared_ptr<const policy::SecretStore>& secrets() const { return secrets_; }
  /// A sandbox prepared by the zygote (ServeOptions::zygote), or null (the runner then clones
  /// init from this process; a zygote that failed is logged).
  runner::PreparedSandboxPtr preparedSandbox();
  static std::string newId(const char* prefix);
  /// What every execution of this daemon runs with (execution/sandbox.hpp).
  execution::Services& services() { return services_; }
  /// Runs `cmd` in `sandbox` for `caller` (runOnce when `once`): `lines` gets its NDJSON
  /// events, `stop_fd` stops it; `asked`, when given, is when the run was asked for (the
  /// start-latency metric).
  base::Result<nlohmann::json> execute(execution::Sandbox& sandbox, const Caller& caller,
                                       const execution::Command& cmd,
                                       const std::function<void(std::string)>& lines, int stop_fd,
                                       std::optional<std::chrono::steady_clock::time_point> asked,
                                       bool once = false);
  /// Largest file a session download returns.
  std::uint64_t maxFileBytes() const { return options_.max_body_bytes; }

 private:
  explicit Engine(const ServeOptions& options, Metrics& metrics);

  base::Result<nlohmann::json> runPrepared(const Caller& caller, const RunRequest& request,
                                           std::unique_ptr<execution::Sandbox> p,
                                           const std::function<void(std::string)>& lines,
                                           int stop_fd, std::shared_ptr<void>* after_answer,
                                           std::chrono::steady_clock::time_point asked);

  ServeOptions options_;
  Metrics& metrics_;
  Pool* pool_ = nullptr;
  std::atomic<bool> zygote_warned_{false};  // preparedSandbox() has warned of its failure
  std::shared_ptr<audit::Store> store_;
  std::shared_ptr<EventTee> tee_;
  std::shared_ptr<OtlpExporter> otlp_;  // null without --otlp-endpoint
  std::shared_ptr<const policy::SecretStore> secrets_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::unique_ptr<proxy::Proxy> proxy_;
  // After proxy_: ended first, so no approval outlives the proxy it would resume.
  std::shared_ptr<proxy::ApprovalDesk> approvals_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const policy::Workflow>> workflows_;
  std::map<std::string, std::shared_ptr<const policy::Matcher>> shadows_;  // by workflow name
  execution::Services services_;
};

}  // namespace sluice::serve
