// The daemon's executions (engine.hpp).
#include "engine.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "pool.hpp"
#include "quotas.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/base/json.hpp"
#include "sluice/execution/wiring.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/runner/environment.hpp"
#include "sluice/runner/receipt.hpp"
#include "timing.hpp"

namespace sluice::serve {
namespace rn = sluice::runner;
namespace pol = sluice::policy;
using nlohmann::json;

namespace {

base::Error badField(const std::string& field, const std::string& why) {
  return apiFail(base::Code::kInvalidArgument, "bad_request", field + ": " + why);
}

std::expected<std::string, std::string> base64Decode(const std::string& in) {
  std::string clean;
  for (char c : in)
    if (c != '\n' && c != '\r') clean += c;
  if (clean.size() % 4 != 0) return std::unexpected(std::string("not base64 (length)"));
  std::string out(clean.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(clean.data()),
                          static_cast<int>(clean.size()));
  if (n < 0) return std::unexpected(std::string("not base64"));
  std::size_t pad = 0;
  if (!clean.empty() && clean.back() == '=') ++pad;
  if (clean.size() > 1 && clean[clean.size() - 2] == '=') ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

// One limit override: a duration or size string, or a count.
base::Result<void> parseLimits(const json& limits, rn::LimitOverrides& ov) {
  if (!limits.is_object()) return std::unexpected(badField("limits", "must be an object"));
  for (const auto& [key, v] : limits.items()) {
    const std::string field = "limits." + key;
    auto text = [&]() -> base::Result<std::string> {
      if (v.is_string()) return v.get<std::string>();
      if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
      return std::unexpected(badField(field, "must be a string or a whole number"));
    }();
    if (!text) return std::unexpected(text.error());
    if (key == "timeout" || key == "cpu_time") {
      auto d = pol::parseDuration(*text);
      if (!d) return std::unexpected(badField(field, d.error()));
      (key == "timeout" ? ov.timeout : ov.cpu_time) = *d;
    } else if (key == "memory" || key == "output" || key == "disk" || key == "file_size") {
      auto s = pol::parseSize(*text);
      if (!s) return std::unexpected(badField(field, s.error()));
      (key == "memory"   ? ov.memory
       : key == "output" ? ov.output
       : key == "disk"   ? ov.disk
                         : ov.file_size) = *s;
    } else if (key == "pids" || key == "open_files") {
      if (!v.is_number_unsigned())
        return std::unexpected(badField(field, "must be a whole number"));
      (key == "pids" ? ov.pids : ov.open_files) = v.get<std::uint64_t>();
    } else {
      return std::unexpected(badField(field,
                                      "unknown limit (timeout, cpu_time, memory, pids, "
                                      "output, disk, file_size, open_files)"));
    }
  }
  return {};
}

}  // namespace

base::Error apiFail(base::Code code, std::string reason, std::string message) {
  base::Error e(code, std::move(message));
  e.reason = std::move(reason);
  return e;
}

ApiError apiError(const base::Error& e) {
  // The API's reason words (schemas/api.v1.yaml) for the statuses an error's code maps to; a
  // finer reason the error carries (a quota's "too_many_runs") is kept as it is.
  static const std::map<int, std::string> kWords = {
      {400, "bad_request"}, {401, "unauthorized"}, {403, "forbidden"},
      {404, "not_found"},   {409, "conflict"},     {413, "payload_too_large"}};
  const int status = base::httpStatus(e.code);
  if (!e.reason.empty()) return ApiError{status, e.reason, e.text(), "", retryAfter(e.reason)};
  if (auto it = kWords.find(status); it != kWords.end())
    return ApiError{status, it->second, e.text(), "", 0};
  return ApiError{500, "internal", e.text(), "", 0};
}

base::Result<bool> parseCommandField(const std::string& key, const json& v,
                                     sluice::execution::Command& out) {
  if (key == "argv") {
    if (!v.is_array() || v.empty())
      return std::unexpected(badField("argv", "must be a non-empty array of strings"));
    for (const auto& a : v) {
      if (!a.is_string()) return std::unexpected(badField("argv", "must hold strings only"));
      out.argv.push_back(a.get<std::string>());
    }
  } else if (key == "stdin") {
    if (!v.is_string()) return std::unexpected(badField("stdin", "must be a string"));
    out.stdin_data = v.get<std::string>();
  } else if (key == "env") {
    if (!v.is_object()) return std::unexpected(badField("env", "must be an object"));
    for (const auto& [name, value] : v.items()) {
      if (!value.is_string()) return std::unexpected(badField("env." + name, "must be a string"));
      out.env.push_back(name + "=" + value.get<std::string>());
    }
  } else {
    return false;
  }
  return true;
}

base::Result<RunRequest> parseRunRequest(const json& body) {
  if (!body.is_object()) return std::unexpected(badField("body", "must be a JSON object"));
  RunRequest r;
  for (const auto& [key, v] : body.items()) {
    auto common = parseCommandField(key, v, r.command);
    if (!common) return std::unexpected(common.error());
    if (*common) continue;
    if (key == "workflow") {
      if (!v.is_string()) return std::unexpected(badField("workflow", "must be a string"));
      r.workflow = v.get<std::string>();
    } else if (key == "learn") {
      if (!v.is_boolean()) return std::unexpected(badField("learn", "must be a boolean"));
      r.learn = v.get<bool>();
    } else if (key == "files") {
      if (!v.is_object()) return std::unexpected(badField("files", "must be an object"));
      for (const auto& [path, content] : v.items()) {
        if (!content.is_string())
          return std::unexpected(badField("files." + path, "must be a base64 string"));
        auto bytes = base64Decode(content.get<std::string>());
        if (!bytes) return std::unexpected(badField("files." + path, bytes.error()));
        r.command.files.push_back(rn::SandboxFile{path, std::move(*bytes), 0644});
      }
    } else if (key == "limits") {
      if (auto ok = parseLimits(v, r.command.limits); !ok) return std::unexpected(ok.error());
    } else {
      return std::unexpected(badField(key, "unknown field"));
    }
  }
  if (r.workflow.empty()) return std::unexpected(badField("workflow", "is required"));
  if (r.command.argv.empty()) return std::unexpected(badField("argv", "is required"));
  return r;
}

base::Result<sluice::execution::Command> parseExecRequest(const json& body) {
  if (!body.is_object()) return std::unexpected(badField("body", "must be a JSON object"));
  sluice::execution::Command cmd;
  for (const auto& [key, v] : body.items()) {
    auto common = parseCommandField(key, v, cmd);
    if (!common) return std::unexpected(common.error());
    if (*common) continue;
    if (key == "cwd") {
      if (!v.is_string()) return std::unexpected(badField("cwd", "must be a string"));
      cmd.cwd = v.get<std::string>();
    } else if (key == "timeout") {
      if (!v.is_string()) return std::unexpected(badField("timeout", "must be a string"));
      auto d = pol::parseDuration(v.get<std::string>());
      if (!d) return std::unexpected(badField("timeout", d.error()));
      if (d->count() <= 0) return std::unexpected(badField("timeout", "must be positive"));
      cmd.limits.timeout = *d;
    } else {
      return std::unexpected(badField(key, "unknown field"));
    }
  }
  if (cmd.argv.empty()) return std::unexpected(badField("argv", "is required"));
  return cmd;
}

Engine::Engine(const ServeOptions& options, Metrics& metrics)
    : options_(options), metrics_(metrics) {}

Engine::~Engine() {
  if (proxy_) proxy_->stop();
  if (otlp_) otlp_->stop();  // after the proxy: its last events are exported too
}

// --shadow-policy-dir: each workflow there compiled, by name (empty without the flag).
static std::expected<std::map<std::string, std::shared_ptr<const pol::Matcher>>, std::string>
loadShadows(const std::string& dir) {
  std::map<std::string, std::shared_ptr<const pol::Matcher>> out;
  if (dir.empty()) return out;
  auto set = pol::loadPolicyDir(dir);
  if (!set) return std::unexpected("--shadow-policy-dir: " + set.error().str());
  for (const auto& [name, w] : set->workflows) out[name] = pol::Matcher::compile(w);
  return out;
}

std::expected<std::unique_ptr<Engine>, std::string> Engine::create(const ServeOptions& options,
                                                                   Metrics& metrics) {
  std::unique_ptr<Engine> e(new Engine(options, metrics));
  // The same checks as `sluice run`'s: a readable file per upstream CA, and root only with
  // full isolation (unprivileged: a warning of what is not enforced).
  if (auto cas = sluice::execution::checkUpstreamCas(options.upstream_cas); !cas)
    return std::unexpected("--upstream-ca " + cas.error().message);
  std::string warning;
  if (auto isolated = sluice::execution::checkIsolation(&warning); !isolated)
    return std::unexpected("sandbox: " + isolated.error().message);
  if (!warning.empty()) spdlog::warn("{}", warning);
  if (!options.secrets.empty()) {
    auto loaded = pol::loadSecretsFile(options.secrets);
    if (!loaded) return std::unexpected("--secrets: " + loaded.error());
    e->secrets_ = std::move(*loaded);
  }
  if (auto r = e->reload(); !r) return std::unexpected(r.error());
  if (!options.ca_dir.empty()) {
    auto loaded = proxy::CertificateAuthority::loadDirectory(options.ca_dir);
    if (!loaded) return std::unexpected("--ca-dir " + options.ca_dir + ": " + loaded.error());
    e->ca_ = std::move(*loaded);
  } else {
    // Inspected TLS without --ca-dir: a CA for this daemon's lifetime, its key only in memory.
    auto made = proxy::CertificateAuthority::createEphemeral("sluice serve CA",
                                                             std::chrono::hours(24 * 30));
    if (!made) return std::unexpected("certificate authority: " + made.error());
    e->ca_ = std::move(*made);
  }
  audit::StoreOptions store_options;
  // A resident daemon: a page cache smaller than the default keeps its RSS from growing with
  // the database. 1 MiB, not less: each execution writing rows at once keeps a leaf of each
  // partial *_execution index hot, and with 64 sessions' traffic (--max-sessions) a 256 KiB
  // cache re-read them, costing the store 1.6-1.8x the CPU per request (`audit_bench`
  // BM_ProxyRequestRows/64/135/64/{256,1024}; docs/benchmarks.md, "The audit writer's page
  // cache").
  store_options.cache_kib = 1024;
  if (!options.signing_key.empty()) {
    auto key = audit::SigningKey::load(options.signing_key);
    if (!key) return std::unexpected("--signing-key: " + key.error().message);
    store_options.signing_key = *key;
  }
  auto store = audit::Store::open(options.audit_db, store_options);
  if (!store) return std::unexpected("audit store: " + store.error().message);
  e->store_ = std::shared_ptr<audit::Store>(std::move(*store));
  std::shared_ptr<audit::EventSink> sink = e->store_;
  if (!options.otlp_endpoint.empty()) {
    OtlpOptions otlp_options;
    otlp_options.endpoint = options.otlp_endpoint;
    otlp_options.interval = options.otlp_interval;
    otlp_options.ca_file = options.otlp_ca;
    auto otlp =
        OtlpExporter::start(std::move(otlp_options), [&metrics] { return metrics.counters(); });
    if (!otlp) return std::unexpected(otlp.error().message);
    e->otlp_ = std::move(*otlp);
    sink = e->otlp_->wrap(std::move(sink));
  }
  e->tee_ = std::make_shared<EventTee>(std::move(sink), metrics);
  e->approvals_ = std::make_shared<proxy::ApprovalDesk>(e->tee_);
  // A pending approval shows in the live stream of the run or session it holds up.
  e->approvals_->watch("",
                       [tee = e->tee_.get()](const proxy::Approval& a) { tee->approvalRaised(a); });
  proxy::ProxyOptions popts;
  popts.threads = 2;
  popts.ca = e->ca_;
  popts.upstream_ca_files = options.upstream_cas;
  auto px = proxy::Proxy::create(popts, e->tee_, proxy::systemResolver());
  if (!px) return std::unexpected("proxy: " + px.error().message);
  e->proxy_ = std::move(*px);
  e->proxy_->start();
  e->services_.proxy = e->proxy_.get();
  e->services_.store = e->store_;
  e->services_.approvals = e->approvals_;
  e->services_.secrets = e->secrets_;
  e->services_.ca = e->ca_;
  e->services_.prepared = [engine = e.get()] { return engine->preparedSandbox(); };
  e->services_.on_committed = [&metrics] { metrics.runFinished(); };
  return e;
}

std::expected<void, std::string> Engine::reload() {
  auto set = pol::loadPolicyDir(options_.policy_dir);
  if (!set) return std::unexpected(set.error().str());
  // All or nothing (at start and on SIGHUP): a workflow that needs a secret the store lacks
  // refuses the load. Names only, never values.
  for (const auto& [name, w] : set->workflows)
    if (auto missing = pol::missingSecrets(*w, secrets_.get()); !missing.empty())
      return std::unexpected("workflow '" + name + "' references secret '" + missing.front() +
                             "', which " +
                             (options_.secrets.empty() ? std::string("no --secrets FILE gives")
                                                       : options_.secrets + " lacks"));
  auto shadows = loadShadows(options_.shadow_policy_dir);
  if (!shadows) return std::unexpected(shadows.error());
  std::lock_guard lock(mu_);
  workflows_ = set->workflows;
  shadows_ = std::move(*shadows);
  return {};
}

base::Result<sluice::execution::OpenOptions> Engine::openOptions(
    std::shared_ptr<const pol::Workflow> w, sluice::execution::SandboxKind kind, std::string id,
    bool learn) const {
  if (learn && !options_.allow_learn)
    return std::unexpected(apiFail(base::Code::kPermissionDenied, "learn_not_allowed",
                                   "learn mode lets through what the policy denies; this daemon "
                                   "was not started with --allow-learn"));
  sluice::execution::OpenOptions o{std::move(w), kind, std::move(id)};
  o.learn = learn;
  std::lock_guard lock(mu_);
  if (auto it = shadows_.find(o.workflow->name); it != shadows_.end()) o.shadow = it->second;
  return o;
}

std::vector<WorkflowInfo> Engine::workflows() const {
  std::lock_guard lock(mu_);
  std::vector<WorkflowInfo> out;
  for (const auto& [name, w] : workflows_) out.push_back({name, w->description, w->sha256});
  return out;
}

std::shared_ptr<const pol::Workflow> Engine::workflow(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = workflows_.find(name);
  return it == workflows_.end() ? nullptr : it->second;
}

std::uint64_t Engine::auditQueueDepth() const { return store_ ? store_->queueDepth() : 0; }

void Engine::flush() {
  if (store_) (void)store_->flush();
}

std::string Engine::newId(const char* prefix) { return sluice::execution::newExecutionId(prefix); }

rn::PreparedSandboxPtr Engine::preparedSandbox() {
  if (!options_.zygote) return nullptr;
  auto p = options_.zygote->prepare();
  if (p) return std::move(*p);
  // Warned once: a zygote that is gone stays gone, and every sandbox would say so again.
  spdlog::log(zygote_warned_.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
              "{}: {}; building the sandbox from the daemon itself", p.error().where,
              p.error().message);
  return nullptr;
}

base::Result<json> Engine::run(const Caller& caller, const RunRequest& request,
                               const std::function<void(std::string)>& lines, int stop_fd,
                               std::shared_ptr<void>* after_answer) {
  const auto asked = std::chrono::steady_clock::now();
  auto w = workflow(request.workflow);
  if (!w)
    return std::unexpected(apiFail(base::Code::kNotFound, "not_found",
                                   "workflow '" + request.workflow + "' is not served"));
  // A prepared sandbox has the workflow's session-wide limits: only a run that tightens nothing
  // but its timeout can take one.
  const auto& o = request.command.limits;
  const bool poolable =
      !o.cpu_time && !o.memory && !o.pids && !o.output && !o.disk && !o.file_size && !o.open_files;
  // A prepared sandbox enforces (learn mode is asked for per run, and refused by openOptions
  // when the daemon does not allow it), so a pooled run needs no options of its own.
  if (pool_ && poolable && !request.learn)
    if (auto p = pool_->take(*w))
      return runPrepared(caller, request, std::move(p), lines, stop_fd, after_answer, asked);
  auto open = openOptions(w, sluice::execution::SandboxKind::kOneShot, "", request.learn);
  if (!open) return std::unexpected(open.error());
  auto sandbox = sluice::execution::Sandbox::open(services_, std::move(*open));
  if (!sandbox) return std::unexpected(sandbox.error());
  return execute(**sandbox, caller, request.command, lines, stop_fd, asked);
}

base::Result<json> Engine::execute(sluice::execution::Sandbox& sandbox, const Caller& caller,
                                   const sluice::execution::Command& cmd,
                                   const std::function<void(std::string)>& lines, int stop_fd,
                                   std::optional<std::chrono::steady_clock::time_point> asked,
                                   bool once) {
  sluice::execution::ExecIo io;
  io.caller = caller.name;
  io.record_caller = true;
  io.stop_fd = stop_fd;
  if (asked)
    io.before_start = [this, asked]() -> base::Result<void> {
      metrics_.runStart(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - *asked).count());
      return {};
    };
  // The run's network decisions (and approvals) and its output, as NDJSON lines.
  const std::string exec_id = sandbox.nextExecutionId();
  if (lines) {
    tee_->subscribe(exec_id, lines);
    io.live = [&lines](int stream, std::string_view data) {
      json j = {{"type", stream == 1 ? "stdout" : "stderr"}, {"data", std::string(data)}};
      lines(base::dumpJson(j));
    };
  }
  auto receipt = once ? sandbox.runOnce(cmd, io) : sandbox.exec(cmd, io);
  if (lines) tee_->unsubscribe(exec_id);
  if (auto* trace = StepTrace::current(); trace && receipt) {
    // The runner stamps when the exec was sent to init and when its outcome was complete.
    trace->markAt("sandbox taken, exec built and sent", receipt->result.started_at);
    trace->markAt("program run and reaped, counters read", receipt->result.ended_at);
    trace->mark("receipt built and committed");
  }
  if (!receipt) return std::unexpected(receipt.error());
  return std::move(receipt->json);
}

// A run in a prepared sandbox: one exec, then the sandbox ends.
base::Result<json> Engine::runPrepared(const Caller& caller, const RunRequest& request,
                                       std::unique_ptr<sluice::execution::Sandbox> p,
                                       const std::function<void(std::string)>& lines, int stop_fd,
                                       std::shared_ptr<void>* after_answer,
                                       std::chrono::steady_clock::time_point asked) {
  // The sandbox is used once, whatever happens. It is retired (torn down, and its replacement
  // built) once the last holder lets go: at the end of this call, or once the answer is out.
  std::shared_ptr<sluice::execution::Sandbox> held(
      p.release(), [pool = pool_](sluice::execution::Sandbox* q) {
        pool->retire(std::unique_ptr<sluice::execution::Sandbox>(q));
      });
  if (after_answer) *after_answer = held;
  return execute(*held, caller, request.command, lines, stop_fd, asked, true);
}

std::optional<json> Engine::execution(const Caller& caller, const std::string& id) {
  auto reader = audit::Reader::open(options_.audit_db);
  if (!reader) return std::nullopt;
  auto detail = (*reader)->show(id);
  if (!detail || !*detail) return std::nullopt;
  json receipt = json::parse((*detail)->receipt_json, nullptr, false);
  // Another caller's, a `sluice run`'s, or a session's summary (not an execution): not found.
  if (receipt.is_discarded() || !receipt.contains("caller") || receipt["caller"] != caller.name ||
      !receipt.contains("execution_id"))
    return std::nullopt;
  if (auto h = (*detail)->execution.rows; !h.empty()) {
    // The stored receipt predates its own hash: add it back, as `sluice run --json` shows it.
    const auto& cols = (*detail)->execution.columns;
    for (std::size_t i = 0; i < cols.size(); ++i)
      if (cols[i] == "hash")
        if (auto* s = std::get_if<std::string>(&h[0][i])) receipt["hash"] = *s;
  }
  return receipt;
}

}  // namespace sluice::serve
