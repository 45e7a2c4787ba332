// `sluice run` and `sluice gc`: policy -> sandbox limits, the sandbox's listener -> the
// in-process proxy, the result -> a receipt committed to the audit store.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/base/json.hpp"
#include "sluice/execution/approve_with.hpp"
#include "sluice/execution/wiring.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/proxy/resolver.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/environment.hpp"
#include "sluice/runner/limits.hpp"
#include "sluice/runner/receipt.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::cli {
namespace {

namespace pol = sluice::policy;
namespace rn = sluice::runner;

constexpr int kSluiceFailed = 125;
constexpr std::chrono::hours kExecutionCaValidity{24};

struct RunOptions {
  std::string policy_file, workflow, policy_dir;
  std::string audit_db = "./sluice-audit.db";
  std::string audit_group;
  std::string signing_key;  // audit checkpoints' Ed25519 key (issue 15)
  std::string secrets;
  std::vector<std::string> upstream_cas;
  std::vector<std::string> env, inputs;
  std::string output_dir, receipt_file;
  std::string timeout, cpu_time, memory, pids, output, disk, file_size, open_files;
  bool json = false;
  std::string approve_with;  // CMD answering approvals of ask rules
  std::vector<std::string> command;
};

int fail(const std::string& step, const std::string& message) {
  std::cerr << "sluice run: " << step << ": " << message << "\n";
  return kSluiceFailed;
}

std::expected<std::shared_ptr<const pol::Workflow>, std::string> loadWorkflow(const RunOptions& o) {
  if (!o.policy_file.empty()) {
    if (!o.workflow.empty() || !o.policy_dir.empty())
      return std::unexpected("give either --policy FILE or --workflow NAME --policy-dir DIR");
    auto w = pol::loadWorkflowFile(o.policy_file);
    if (!w) return std::unexpected(w.error().str());
    return std::make_shared<const pol::Workflow>(std::move(*w));
  }
  if (o.workflow.empty() || o.policy_dir.empty())
    return std::unexpected("give --policy FILE, or --workflow NAME with --policy-dir DIR");
  auto set = pol::loadPolicyDir(o.policy_dir);
  if (!set) return std::unexpected(set.error().str());
  auto it = set->workflows.find(o.workflow);
  if (it == set->workflows.end())
    return std::unexpected("workflow '" + o.workflow + "' is not in " + o.policy_dir);
  return it->second;
}

std::expected<rn::Limits, std::string> effectiveLimits(const pol::Workflow& w,
                                                       const RunOptions& o) {
  rn::LimitOverrides ov;
  // One parser per kind of value; the shared wrapper skips unset options and names the
  // option in errors.
  auto parseCount = [](const std::string& text) -> std::expected<std::uint64_t, std::string> {
    try {
      size_t used = 0;
      unsigned long long v = std::stoull(text, &used);
      if (used == text.size()) return v;
    } catch (...) {
    }
    return std::unexpected(std::string("not a whole number"));
  };
  auto option = [](const char* opt, const std::string& text, auto& dst,
                   auto parse) -> std::expected<void, std::string> {
    if (text.empty()) return {};
    auto v = parse(text);
    if (!v) return std::unexpected(std::string("--") + opt + " " + text + ": " + v.error());
    dst = *v;
    return {};
  };
  auto dur = [&](const char* opt, const std::string& text, auto& dst) {
    return option(opt, text, dst, [](const std::string& t) { return pol::parseDuration(t); });
  };
  auto size = [&](const char* opt, const std::string& text, auto& dst) {
    return option(opt, text, dst, [](const std::string& t) { return pol::parseSize(t); });
  };
  auto count = [&](const char* opt, const std::string& text, auto& dst) {
    return option(opt, text, dst, parseCount);
  };
  for (auto r : {dur("timeout", o.timeout, ov.timeout), dur("cpu-time", o.cpu_time, ov.cpu_time),
                 size("memory", o.memory, ov.memory), count("pids", o.pids, ov.pids),
                 size("output", o.output, ov.output), size("disk", o.disk, ov.disk),
                 size("file-size", o.file_size, ov.file_size),
                 count("open-files", o.open_files, ov.open_files)})
    if (!r) return std::unexpected(r.error());
  return execution::workflowLimits(w, ov);
}

std::expected<std::vector<rn::Input>, std::string> parseInputs(const std::vector<std::string>& in) {
  std::vector<rn::Input> out;
  for (const std::string& spec : in) {
    rn::Input i;
    const auto colon = spec.find(':');
    i.host = spec.substr(0, colon);
    std::string sb = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
    if (sb.starts_with("/input/")) sb = sb.substr(7);
    if (sb.empty()) sb = std::filesystem::path(i.host).lexically_normal().filename().string();
    if (sb.empty())
      sb = std::filesystem::path(i.host).lexically_normal().parent_path().filename().string();
    if (i.host.empty() || sb.empty())
      return std::unexpected("--input " + spec + ": expected HOST[:SANDBOX]");
    i.sandbox = sb;
    out.push_back(std::move(i));
  }
  return out;
}

std::string summaryLine(const rn::RunResult& r, const nlohmann::json& receipt) {
  std::string s = "sluice: " + receipt["execution_id"].get<std::string>() + " ";
  if (r.signal)
    s += "killed by signal " + std::to_string(r.signal);
  else
    s += "exit " + std::to_string(r.exit_code);
  s += " in " + std::to_string(receipt["duration_ms"].get<long long>()) + " ms";
  if (r.limit_hit != rn::LimitHit::kNone)
    s += ", limit hit: " + std::string(rn::limitHitName(r.limit_hit));
  const auto& net = receipt["network"];
  if (net["mode"] == "proxy")
    s += ", network: " + std::to_string(net["allowed"].get<std::uint64_t>()) + " allowed, " +
         std::to_string(net["denied"].get<std::uint64_t>()) + " denied";
  else
    s += ", network: none";
  if (!r.artifacts.empty()) s += ", " + std::to_string(r.artifacts.size()) + " output file(s)";
  return s;
}

// SLUICE_TIMING=1: where `sluice run`'s time goes, one line per phase on stderr.
class PhaseTimer {
 public:
  PhaseTimer()
      : on_(std::getenv("SLUICE_TIMING") != nullptr), last_(std::chrono::steady_clock::now()) {}
  void mark(const std::string& phase) {
    const auto now = std::chrono::steady_clock::now();
    if (on_)
      std::fprintf(stderr, "timing: %-52s %8.3f ms\n", phase.c_str(),
                   std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  void add(const std::string& phase, std::int64_t us) {
    if (on_) std::fprintf(stderr, "timing: %-52s %8.3f ms\n", phase.c_str(), us / 1000.0);
  }
  void reset() { last_ = std::chrono::steady_clock::now(); }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

std::int64_t elapsedUs(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               since)
      .count();
}

// One `sluice run`: the state its runner hooks share, and each step as a member. run() is the
// table of contents; the order of its steps is what keeps secrets and keys out of the sandbox
// and the slow parts (proxy start, store open, commit) overlapped with the sandbox's own.
class RunJob {
 public:
  explicit RunJob(const RunOptions& o) : o_(o) {}
  int run();

 private:
  int prepare();
  int startAuditStore();
  const std::expected<void, std::string>& loadSecrets();
  std::expected<void, std::string> onListener(int fd);
  std::expected<void, std::string> onDns(int udp, int tcp, int blocked);
  std::expected<void, rn::SetupError> beforeStart();
  void startReceipt(const rn::RunResult& r);
  rn::RunHooks hooks();
  void recordFailure(const rn::SetupError& e);
  int output();

  const RunOptions& o_;
  PhaseTimer timer_;
  std::shared_ptr<const pol::Workflow> workflow_;
  bool full_isolation_ = false;
  // Secrets are read only once the sandbox's init exists (loadSecrets(), from the runner's
  // hooks): where init is cloned from this process (the unprivileged path) it would otherwise
  // inherit the copies of the values that parsing leaves in freed heap memory. A bad or
  // incomplete store (mode 0600, owner, every referenced name present) still stops the run
  // before the program starts. Values stay in the store, which only the proxy reads; errors
  // name secrets, never values.
  std::shared_ptr<const pol::SecretStore> secrets_;
  std::optional<std::expected<void, std::string>> secrets_loaded_;
  // Placeholders: the sandbox gets VAR=<random token> per rule with inject.placeholder_env;
  // the proxy swaps the token for the secret only on that rule's requests.
  std::vector<proxy::Placeholder> placeholders_;
  rn::RunSpec spec_;
  std::shared_ptr<proxy::CertificateAuthority> ca_;
  std::shared_ptr<audit::Store> store_;
  std::unique_ptr<proxy::Proxy> px_;
  // The execution's synthetic DNS names: written by its DNS server, read by its listeners.
  std::shared_ptr<proxy::SyntheticNames> names_ = std::make_shared<proxy::SyntheticNames>();
  // Ask rules wait for --approve-with's answer; without it nobody can answer, and they are
  // refused at once (approval_unavailable). Declared after the proxy: destroyed before it.
  std::shared_ptr<proxy::ApprovalDesk> approvals_;
  std::unique_ptr<execution::ApproveWith> approver_;
  std::shared_ptr<const pol::Matcher> matcher_;
  rn::ReceiptContext ctx_;
  nlohmann::json receipt_;
  audit::ExecutionRecord rec_;
  std::optional<audit::PendingExecution> commit_;
  std::int64_t proxy_start_us_ = 0, gc_us_ = 0, audit_wait_us_ = 0, receipt_us_ = 0;
};

// Policy, limits, inputs, environment and the spec: everything decided before the sandbox
// exists. Returns 0, or the exit status of a failure it reported.
int RunJob::prepare() {
  auto workflow = loadWorkflow(o_);
  if (!workflow) return fail("policy", workflow.error());
  workflow_ = std::move(*workflow);
  const pol::Workflow& w = *workflow_;
  auto limits = effectiveLimits(w, o_);
  if (!limits) return fail("limits", limits.error());
  auto inputs = parseInputs(o_.inputs);
  if (!inputs) return fail("input", inputs.error());
  const bool network_proxy = w.sandbox.network == pol::NetworkMode::kProxy;
  for (const std::string& f : o_.upstream_cas) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec) || ::access(f.c_str(), R_OK) != 0)
      return fail("upstream CA", f + ": not a readable file");
  }
  if (network_proxy) placeholders_ = proxy::makePlaceholders(w);
  auto sandbox_env = execution::sandboxEnvironment(o_.env, placeholders_, network_proxy);
  if (!sandbox_env) return fail("environment", "--env " + sandbox_env.error());
  std::string why;
  full_isolation_ = rn::sandboxSupported(&why);
  if (!full_isolation_) {
    if (::geteuid() == 0) return fail("sandbox", why);
    // Unprivileged: user namespaces still give every namespace, seccomp and Landlock, but no
    // cgroups. Say what is not enforced.
    std::cerr << "sluice run: warning: not root: running in a user namespace without cgroups; "
                 "the memory limit is not enforced, pids is enforced by RLIMIT_NPROC only, and "
                 "cpu_time per process only\n";
  }
  timer_.mark("cli: load policy, limits, checks");
  spec_.argv = o_.command;
  spec_.env = std::move(*sandbox_env);
  spec_.limits = *limits;
  spec_.network_proxy = network_proxy;
  spec_.inputs = std::move(*inputs);
  for (const auto& m : w.sandbox.mounts) spec_.mounts.push_back({m.source, m.target});
  spec_.output_dir = o_.output_dir;
  spec_.execution_id = execution::newExecutionId();
  // TLS inspection: a CA for this execution alone, its key only in this process's memory (the
  // sandbox's processes descend from the helper forked first, before the key existed); the
  // sandbox trusts it through the bundle the runner's SSL_CERT_FILE & co. point at.
  if (network_proxy && execution::inspectsTls(w)) {
    auto made = proxy::CertificateAuthority::createEphemeral(
        "sluice execution CA " + spec_.execution_id, kExecutionCaValidity);
    if (!made) return fail("certificate authority", made.error());
    ca_ = std::move(*made);
    spec_.extra_files = execution::caBundleFiles(w, *ca_);
  }
  timer_.mark("cli: execution CA");
  ctx_.workflow = w.name;
  ctx_.policy_sha256 = w.sha256;
  ctx_.network_mode = network_proxy ? "proxy" : "none";
  return 0;
}

// Opened on the store's own thread while the sandbox is built; the runner waits for it
// (beforeStart) before the program may start, so nothing runs unaudited.
int RunJob::startAuditStore() {
  if (o_.audit_db.empty()) return 0;
  // The WAL's copy into the .db file is left to the next writer's open (docs/audit.md): it
  // would cost an fsync on the way out of every run.
  audit::StoreOptions store_options;
  store_options.checkpoint_on_close = false;
  if (!o_.audit_group.empty()) {
    auto gid = groupId(o_.audit_group);
    if (!gid) return fail("audit store", gid.error());
    store_options.group = *gid;
  }
  if (!o_.signing_key.empty()) {
    // Read here, in sluice's own process, before the sandbox exists: the sandbox never sees
    // the file (no host home or /tmp in it) and the key is never in its environment.
    auto key = audit::SigningKey::load(o_.signing_key);
    if (!key) return fail("signing key", key.error().message);
    store_options.signing_key = *key;
  }
  store_ = audit::Store::openAsync(o_.audit_db, store_options);
  store_->recordPolicy(workflow_->sha256, workflow_->name, workflow_->yaml_text);
  return 0;
}

const std::expected<void, std::string>& RunJob::loadSecrets() {
  if (secrets_loaded_) return *secrets_loaded_;
  secrets_loaded_.emplace();
  if (!o_.secrets.empty()) {
    auto loaded = pol::loadSecretsFile(o_.secrets);
    if (!loaded) return *secrets_loaded_ = std::unexpected(loaded.error());
    secrets_ = std::move(*loaded);
  }
  if (auto missing = pol::missingSecrets(*workflow_, secrets_.get()); !missing.empty()) {
    std::string names;
    for (const auto& n : missing) names += (names.empty() ? "" : ", ") + n;
    *secrets_loaded_ =
        std::unexpected((o_.secrets.empty() ? std::string("no --secrets FILE given; the")
                                            : o_.secrets + " lacks secret(s) the") +
                        " workflow references: " + names);
  }
  return *secrets_loaded_;
}

// The proxy is made while the sandbox's init builds its namespaces and mounts (the runner
// calls this, then beforeStart): off the critical path.
std::expected<void, std::string> RunJob::onListener(int fd) {
  if (!loadSecrets()) {  // reported by beforeStart, as step 'secrets'
    ::close(fd);
    return {};
  }
  const auto t = std::chrono::steady_clock::now();
  if (!px_) {  // called twice (127.0.0.1:3128, then [::1]:3128): one proxy adopts both
    proxy::ProxyOptions popts;
    popts.threads = 1;
    popts.ca = ca_;
    popts.upstream_ca_files = o_.upstream_cas;
    auto p = proxy::Proxy::create(popts, store_, proxy::systemResolver());
    if (!p) {
      ::close(fd);
      return std::unexpected(p.error().message);
    }
    px_ = std::move(*p);
    px_->start();
  }
  if (!matcher_) matcher_ = pol::Matcher::compile(workflow_);
  proxy::ListenerIdentity identity{spec_.execution_id, matcher_, secrets_, placeholders_};
  identity.names = names_;  // redirected connections are decided by the names DNS gave out
  identity.approvals = approvals_;
  auto r = px_->adoptListener(fd, identity);
  proxy_start_us_ += elapsedUs(t);
  if (!r) return std::unexpected(r.error().message);
  return {};
}

std::expected<void, std::string> RunJob::onDns(int udp, int tcp, int blocked) {
  if (!px_) {  // the listener callback failed (secrets): reported by beforeStart
    ::close(udp);
    ::close(tcp);
    ::close(blocked);
    return {};
  }
  proxy::ListenerIdentity identity{spec_.execution_id, matcher_, secrets_, placeholders_};
  identity.names = names_;
  if (auto r = px_->adoptBlockedLog(blocked, identity); !r) {
    ::close(udp);
    ::close(tcp);
    return std::unexpected(r.error().message);
  }
  auto r = px_->adoptDns(udp, tcp, identity);
  if (!r) return std::unexpected(r.error().message);
  return {};
}

std::expected<void, rn::SetupError> RunJob::beforeStart() {
  if (const auto& s = loadSecrets(); !s)
    return std::unexpected(rn::SetupError{rn::SetupError::Kind::kSetup, "secrets", s.error()});
  // Start-up garbage collection: leftovers of a sluice that was SIGKILLed.
  auto t = std::chrono::steady_clock::now();
  if (full_isolation_) (void)rn::collectGarbage();
  gc_us_ = elapsedUs(t);
  if (!store_) return {};
  t = std::chrono::steady_clock::now();
  auto r = store_->ready();
  audit_wait_us_ = elapsedUs(t);
  if (!r)
    return std::unexpected(
        rn::SetupError{rn::SetupError::Kind::kSetup, "audit store", r.error().message});
  return {};
}

// The receipt is built, and its durable commit started, as soon as the runner's result is
// final (on_result), so the commit's fsync overlaps the sandbox's teardown.
void RunJob::startReceipt(const rn::RunResult& r) {
  const auto t = std::chrono::steady_clock::now();
  if (px_) {
    // The sandbox is gone: close what is left of its connections, then stop the proxy so
    // that every connection row is queued before the execution row.
    if (approvals_) approvals_->endExecution(spec_.execution_id);
    px_->closeExecution(spec_.execution_id);
    execution::addNetwork(ctx_, px_->stats(spec_.execution_id));
    px_->stop();
  }
  receipt_ = rn::buildReceipt(spec_, r, ctx_);
  if (store_) {
    rec_ = execution::executionRecord(receipt_, r, ctx_);
    commit_.emplace(store_->beginRecordExecution(rec_));
  }
  receipt_us_ = elapsedUs(t);
}

rn::RunHooks RunJob::hooks() {
  rn::RunHooks h;
  if (spec_.network_proxy) {
    h.on_listener = [this](int fd) { return onListener(fd); };
    h.on_dns = [this](int udp, int tcp, int blocked) { return onDns(udp, tcp, blocked); };
  }
  if (!o_.json)
    h.live = [](int stream, std::string_view data) {
      std::FILE* f = stream == 1 ? stdout : stderr;
      std::fwrite(data.data(), 1, data.size(), f);
      std::fflush(f);
    };
  h.before_start = [this] { return beforeStart(); };
  h.on_result = [this](const rn::RunResult& r) { startReceipt(r); };
  return h;
}

// Still an execution, with a receipt (exit 125 for a failed setup step, 126/127 for a command
// that cannot start), so the agent (--json) and the audit trail see what was attempted and why
// it did not run. A store that failed to open cannot record it.
void RunJob::recordFailure(const rn::SetupError& e) {
  if (px_) px_->stop();
  const bool setup = e.kind == rn::SetupError::Kind::kSetup;
  std::cerr << "sluice run: "
            << (setup ? "setup failed at step '" + e.step + "': " + e.message : e.message) << "\n";
  if (setup && store_ && !store_->healthy()) {
    store_.reset();
    commit_.reset();
  }
}

// The durable commit's end, then the receipt where it was asked for.
int RunJob::output() {
  if (commit_) {
    auto hash = commit_->wait();
    if (!hash) return fail("audit store", hash.error().message);
    receipt_["hash"] = *hash;
  }
  timer_.mark("cli: durable audit commit (rest of)");
  if (!o_.receipt_file.empty()) {
    std::ofstream out(o_.receipt_file);
    out << base::dumpJson(receipt_, 2) << "\n";
    if (!out) return fail("receipt", o_.receipt_file + ": cannot write");
  }
  return 0;
}

int RunJob::run() {
  // First, while this process is single-threaded and holds no policy, secret or key: a helper
  // starts building the sandbox's namespaces alongside everything below (runner/sandbox.hpp).
  auto prepared = rn::prepareSandbox();
  if (!prepared) return fail("sandbox", prepared.error().message);
  timer_.mark("cli: fork namespace helper");
  if (int rc = prepare(); rc != 0) return rc;
  if (int rc = startAuditStore(); rc != 0) return rc;
  timer_.mark("cli: start opening audit store");
  // The program's own output goes to our stdout/stderr: keep the components' info logs out of
  // it (SLUICE_LOG_LEVEL=info|debug brings them back).
  if (const char* lvl = std::getenv("SLUICE_LOG_LEVEL"))
    spdlog::set_level(spdlog::level::from_str(lvl));
  else
    spdlog::set_level(spdlog::level::warn);
  if (spec_.network_proxy && !o_.approve_with.empty()) {
    approvals_ = std::make_shared<proxy::ApprovalDesk>(store_);
    approver_ =
        std::make_unique<execution::ApproveWith>(approvals_, o_.approve_with, spec_.execution_id);
  }
  rn::installStopHandlers();
  // A reader that goes away (sluice run ... | head) must not kill sluice mid-run and leave the
  // sandbox to PR_SET_PDEATHSIG: ignore SIGPIPE; the program gets the default back.
  std::signal(SIGPIPE, SIG_IGN);
  auto result = rn::runSandboxed(spec_, hooks(), std::move(*prepared));
  timer_.add("cli: (during clone) proxy start + matcher compile", proxy_start_us_);
  timer_.add("cli: (during clone) gc of leftovers", gc_us_);
  timer_.add("cli: (during clone) waiting for the audit store to open", audit_wait_us_);
  if (result) {
    for (const auto& [phase, us] : result->phases) timer_.add(phase, us);
    timer_.add("cli: (before teardown) proxy stats + stop, receipt, commit queued", receipt_us_);
  }
  timer_.reset();
  if (!result) {
    recordFailure(result.error());
    result = execution::failedResult(result.error(), spec_, full_isolation_);
    startReceipt(*result);
  }
  if (int rc = output(); rc != 0) return rc;
  if (o_.json)
    std::cout << base::dumpJson(receipt_) << std::endl;
  else
    std::cerr << summaryLine(*result, receipt_) << "\n";
  timer_.mark("cli: output receipt");
  px_.reset();
  timer_.mark("cli: proxy teardown");
  store_.reset();
  timer_.mark("cli: close audit store");
  return result->sluiceExitStatus();
}

int doRun(const RunOptions& o) { return RunJob(o).run(); }

int doGc() {
  auto r = rn::collectGarbage();
  if (!r) {
    std::cerr << "sluice gc: " << r.error() << "\n";
    return 1;
  }
  for (const auto& c : r->removed_cgroups) std::cout << "removed cgroup " << c << "\n";
  for (const auto& p : r->killed_pids) std::cout << "killed pid " << p << "\n";
  for (const auto& e : r->errors) std::cerr << "sluice gc: " << e << "\n";
  if (r->removed_cgroups.empty() && r->errors.empty()) std::cout << "nothing to collect\n";
  return r->errors.empty() ? 0 : 1;
}

}  // namespace

void addRunCommands(CLI::App& app, int& exit_code,
                    std::optional<std::vector<std::string>> trailing) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand(
      "run", "Run a command in a sandbox whose only way out is the policy-checked proxy");
  run->add_option("--policy", o->policy_file, "Workflow policy file");
  run->add_option("--workflow", o->workflow, "Workflow name (with --policy-dir)");
  run->add_option("--policy-dir", o->policy_dir, "Directory of workflow policies");
  run->add_option("--audit", o->audit_db,
                  "Audit database (default ./sluice-audit.db; \"\" = none)");
  run->add_option("--signing-key", o->signing_key,
                  "Sign audit checkpoints with this Ed25519 key (sluice audit keygen; 0600)");
  run->add_option("--audit-group", o->audit_group,
                  "Create the audit database 0640 with this group (default: 0600, owner only)");
  run->add_option("--secrets", o->secrets, "Secret store file (mode 0600)");
  run->add_option("--upstream-ca", o->upstream_cas,
                  "Extra CA file trusted for inspected upstreams (repeatable)");
  run->add_option("--env", o->env, "NAME=VALUE added to the sandbox's environment");
  run->add_option("--input", o->inputs, "HOST[:SANDBOX]: read-only under /input");
  run->add_option("--output-dir", o->output_dir, "Where /output is copied after the run");
  run->add_option("--timeout", o->timeout, "Wall-clock limit (may only tighten)");
  run->add_option("--cpu-time", o->cpu_time, "CPU time limit (may only tighten)");
  run->add_option("--memory", o->memory, "Memory limit, swap included (may only tighten)");
  run->add_option("--pids", o->pids, "Process limit (may only tighten)");
  run->add_option("--output", o->output, "Captured output per stream (may only tighten)");
  run->add_option("--disk", o->disk, "Size of /work + /tmp + /output (may only tighten)");
  run->add_option("--file-size", o->file_size, "Largest file (may only tighten)");
  run->add_option("--open-files", o->open_files, "Open file limit (may only tighten)");
  run->add_option("--receipt", o->receipt_file, "Also write the receipt JSON here");
  run->add_option("--approve-with", o->approve_with,
                  "Command answering approvals of ask rules: gets the approval JSON on stdin, "
                  "prints allow or deny [execution]");
  run->add_flag("--json", o->json, "Print only the receipt JSON on stdout");
  auto* command = run->add_option("command", o->command, "-- CMD [ARGS...]");
  if (!trailing || trailing->empty()) command->required();
  run->callback([o, &exit_code, trailing] {
    // Arguments after `--` (main() took them out) follow any given before it.
    if (trailing) o->command.insert(o->command.end(), trailing->begin(), trailing->end());
    exit_code = doRun(*o);
  });

  CLI::App* gc = app.add_subcommand("gc", "Remove cgroups left by a sluice that was killed");
  gc->callback([&exit_code] { exit_code = doGc(); });
}

}  // namespace sluice::cli
