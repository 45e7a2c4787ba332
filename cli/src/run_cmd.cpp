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
#include <set>

#include "commands.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/base/json.hpp"
#include "sluice/execution/approve_with.hpp"
#include "sluice/execution/sandbox.hpp"
#include "sluice/execution/wiring.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/policy/target.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/proxy/approvals.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/proxy/resolver.hpp"
#include "sluice/runner/cgroup.hpp"
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
  std::string signing_key;  // audit checkpoints' Ed25519 key
  std::string secrets;
  std::vector<std::string> upstream_cas;
  std::vector<std::string> env, inputs;
  std::string output_dir, receipt_file;
  std::string timeout, cpu_time, memory, pids, output, disk, file_size, open_files;
  bool json = false;
  std::string approve_with;   // CMD answering approvals of ask rules
  std::string shadow_policy;  // --shadow-policy FILE: a candidate decided alongside
  bool learn = false;         // --learn
  std::vector<std::string> command;
};

// Learn mode says so loudly, before the program starts and after it ends (docs/policy.md).
constexpr const char* kLearnBanner =
    "sluice run: mode: learn -- what no rule explicitly denies is LET THROUGH and recorded as "
    "would_deny; this run does not enforce its policy";

// --shadow-policy FILE compiled (null when not given).
std::expected<std::shared_ptr<const pol::Matcher>, std::string> loadShadow(
    const std::string& file) {
  if (file.empty()) return nullptr;
  auto w = pol::loadWorkflowFile(file);
  if (!w) return std::unexpected(w.error().str());
  return pol::Matcher::compile(std::make_shared<const pol::Workflow>(std::move(*w)));
}

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

// The limit flags as overrides (the sandbox refuses one that would loosen the workflow's).
std::expected<rn::LimitOverrides, std::string> limitOverrides(const RunOptions& o) {
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
  return ov;
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
  // The receipt's own counts (docs/audit.md "What is counted"): attempts first, then the rows
  // they come from, so "2 allowed" can be found as two rows in `audit query`.
  auto n = [&](const char* key) { return std::to_string(net.value(key, std::uint64_t{0})); };
  if (net["mode"] == "proxy") {
    s += ", network: " + n("allowed") + " allowed, " + n("denied") + " denied, " + n("failed") +
         " failed (" + n("connections") + " connections, " + n("requests") + " requests";
    if (const auto& dns = net.value("dns", nlohmann::json::object()); dns.value("queries", 0) > 0)
      s += ", " + std::to_string(dns.value("queries", 0)) + " DNS queries";
    s += ")";
  } else {
    s += ", network: none";
  }
  if (!r.artifacts.empty()) s += ", " + std::to_string(r.artifacts.size()) + " output file(s)";
  return s;
}

// The policy's own account of the nearest rule (what `policy explain` prints), for a
// connection (`method` empty) or a request seen inside it; "" when there is none.
std::string nearestMiss(const pol::Matcher& matcher, const std::string& host, std::uint16_t port,
                        const std::string& method, const std::string& path) {
  auto t = pol::makeTarget(host, port);
  if (!t) return {};
  pol::HttpRequest req{method, path, {}};
  pol::Query q{*t, port == 80 ? pol::Visibility::kPlainHttp : pol::Visibility::kTunnel,
               method.empty() ? nullptr : &req};
  const pol::Decision dec = matcher.decide(q);
  return !dec.allowed && !dec.nearest_miss.empty() ? "; nearest miss: " + dec.nearest_miss : "";
}

// Failures of the network are not refusals: one line each (up to 10, then a count), so a
// name that does not resolve is not mistaken for the policy's answer.
void printFailures(const nlohmann::json& receipt) {
  constexpr std::size_t kShown = 10;
  std::set<std::string> seen;
  std::size_t more = 0;
  for (const auto& f : receipt["network"].value("failures", nlohmann::json::array())) {
    const std::string where =
        f.value("host", "") + ":" + std::to_string(f.value("port", 0)) + f.value("path", "");
    const std::string reason = f.value("reason", "");
    if (!seen.insert(where + " " + reason).second) continue;
    if (seen.size() > kShown) {
      ++more;
      continue;
    }
    std::cerr << proxy::displayText("sluice: failed " + f.value("method", std::string("CONNECT")) +
                                    " " + where + " - " + reason + " (allowed; the network failed)")
              << "\n";
  }
  if (more > 0) std::cerr << "sluice: and " << more << " more distinct failures (audit query)\n";
}

// One stderr line per distinct refusal (up to kShown, then a count): a client behind a
// passthrough tunnel sees only "CONNECT tunnel failed, response 403", so this is where the
// person at the terminal learns why, and how to ask the policy about it.
void printRefusals(const nlohmann::json& receipt, const execution::Sandbox& sandbox) {
  constexpr std::size_t kShown = 10;
  const auto& denials = receipt["network"].value("denials", nlohmann::json::array());
  std::set<std::string> seen;
  std::size_t more = 0;
  std::shared_ptr<const pol::Matcher> matcher;  // the proxy's, asked only when needed
  for (const auto& d : denials) {
    const std::string host = d.value("host", ""), reason = d.value("reason", "");
    const std::string method = d.value("method", ""), path = d.value("path", "");
    const auto port = static_cast<std::uint16_t>(d.value("port", 0));
    const std::string where = host + ":" + std::to_string(port);
    if (host.empty() || !seen.insert(method + " " + where + path + " " + reason).second) continue;
    if (seen.size() > kShown) {
      ++more;
      continue;
    }
    std::string line = "sluice: denied " + (method.empty() ? "CONNECT" : method) + " " + where +
                       path + " - " + reason;
    if (const auto& rule = d["rule"]; rule.is_string() && !rule.get<std::string>().empty())
      line += " (rule " + rule.get<std::string>() + ")";
    if (!matcher) matcher = sandbox.matcher();
    line += nearestMiss(*matcher, host, port, method, path);
    // The host came from the sandbox: no byte of it may drive the terminal. The policy is the
    // file the workflow was loaded from (a --policy-dir workflow's file need not be NAME.yaml).
    std::string explain = method.empty() ? " --connect " + where
                                         : " --url " + std::string(port == 80 ? "http" : "https") +
                                               "://" + where + path + " --method " + method;
    std::cerr << proxy::displayText(line) << "\n  reproduce: sluice policy explain --policy "
              << sandbox.workflow().source_path << proxy::displayText(explain) << "\n";
  }
  if (more > 0) std::cerr << "sluice: and " << more << " more distinct refusals (audit query)\n";
  printFailures(receipt);
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

// One `sluice run`: an execution::Sandbox opened on the workflow, the services it runs with
// (a proxy and an audit store for this execution alone), and one exec. run() is the table of
// contents; the order of its steps is what keeps secrets and keys out of the sandbox and the
// slow parts (proxy start, store open, commit) overlapped with the sandbox's own.
class RunJob {
 public:
  explicit RunJob(const RunOptions& o) : o_(o) {}
  int run();

 private:
  int prepare();
  int startAuditStore();
  int openSandbox();
  const std::expected<void, std::string>& loadSecrets();
  base::Result<void> startNetwork();
  base::Result<void> beforeStart();
  execution::ExecIo io();
  void reportFailure(const base::Error& e);
  int output(execution::Receipt& receipt);

  const RunOptions& o_;
  PhaseTimer timer_;
  std::shared_ptr<const pol::Workflow> workflow_;
  execution::Command command_;
  std::string id_;
  bool full_isolation_ = false;  // root with cgroups
  // Secrets are read only once the sandbox's init exists (loadSecrets(), from the runner's
  // hooks): where init is cloned from this process (the unprivileged path) it would otherwise
  // inherit the copies of the values that parsing leaves in freed heap memory. A bad or
  // incomplete store (mode 0600, owner, every referenced name present) still stops the run
  // before the program starts. Values stay in the store, which only the proxy reads; errors
  // name secrets, never values.
  std::shared_ptr<const pol::SecretStore> secrets_;
  std::optional<std::expected<void, std::string>> secrets_loaded_;
  rn::PreparedSandboxPtr prepared_;
  std::shared_ptr<audit::Store> store_;
  std::unique_ptr<proxy::Proxy> px_;
  execution::Services services_;
  // Ask rules wait for --approve-with's answer; without it nobody can answer, and they are
  // refused at once (approval_unavailable). Declared after the proxy: destroyed before it.
  std::unique_ptr<execution::ApproveWith> approver_;
  std::unique_ptr<execution::Sandbox> sandbox_;
  std::int64_t proxy_start_us_ = 0, gc_us_ = 0, audit_wait_us_ = 0;
};

// Policy, the command, limits, inputs and the CA: everything decided before the sandbox
// exists. Returns 0, or the exit status of a failure it reported.
int RunJob::prepare() {
  auto workflow = loadWorkflow(o_);
  if (!workflow) return fail("policy", workflow.error());
  workflow_ = std::move(*workflow);
  const pol::Workflow& w = *workflow_;
  auto overrides = limitOverrides(o_);
  if (!overrides) return fail("limits", overrides.error());
  auto inputs = parseInputs(o_.inputs);
  if (!inputs) return fail("input", inputs.error());
  if (auto cas = execution::checkUpstreamCas(o_.upstream_cas); !cas)
    return fail(cas.error().where, cas.error().message);
  command_.argv = o_.command;
  command_.env = o_.env;
  command_.limits = *overrides;
  command_.inputs = std::move(*inputs);
  command_.output_dir = o_.output_dir;
  id_ = execution::newExecutionId();
  // TLS inspection: a CA for this execution alone, its key only in this process's memory (the
  // sandbox's processes descend from the helper forked first, before the key existed); the
  // sandbox trusts it through the bundle the runner's SSL_CERT_FILE & co. point at.
  if (w.sandbox.network == pol::NetworkMode::kProxy && execution::inspectsTls(w)) {
    auto made = proxy::CertificateAuthority::createEphemeral("sluice execution CA " + id_,
                                                             kExecutionCaValidity);
    if (!made) return fail("certificate authority", made.error());
    services_.ca = std::move(*made);
  }
  timer_.mark("cli: load policy, limits, checks, execution CA");
  return 0;
}

// The sandbox, opened on the workflow (placeholders, CA bundle), and the command checked
// against it (placeholder variables, limits that would loosen), before anything is started.
int RunJob::openSandbox() {
  services_.start_network = [this] { return startNetwork(); };
  services_.proxy_per_execution = true;
  services_.answer_unrecorded = true;
  services_.prepared = [this] { return std::move(prepared_); };
  auto shadow = loadShadow(o_.shadow_policy);
  if (!shadow) return fail("shadow policy", shadow.error());
  execution::OpenOptions open{workflow_, execution::SandboxKind::kOneShot, id_};
  open.shadow = std::move(*shadow);
  open.learn = o_.learn;
  auto opened = execution::Sandbox::open(services_, std::move(open));
  if (!opened) return fail(opened.error().where, opened.error().message);
  sandbox_ = std::move(*opened);
  if (auto ok = sandbox_->check(command_); !ok) {
    const auto& e = ok.error();
    // The runner's own messages already name the flag ("--env NAME: ...").
    if (e.where == "env")
      return fail("environment",
                  e.message.starts_with("--env ") ? e.message : "--env " + e.message);
    return fail(e.where, e.message);
  }
  std::string warning;
  auto isolated = execution::checkIsolation(&warning);
  if (!isolated) return fail(isolated.error().where, isolated.error().message);
  full_isolation_ = *isolated;
  if (!warning.empty()) std::cerr << "sluice run: warning: " << warning << "\n";
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
  services_.store = store_;
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

// The proxy is made when the sandbox's first listener arrives, while its init builds its
// namespaces and mounts: off the critical path.
base::Result<void> RunJob::startNetwork() {
  if (const auto& s = loadSecrets(); !s) return base::fail(base::Code::kIo, s.error(), "secrets");
  services_.secrets = secrets_;
  const auto t = std::chrono::steady_clock::now();
  proxy::ProxyOptions popts;
  popts.threads = 1;
  popts.ca = services_.ca;
  popts.upstream_ca_files = o_.upstream_cas;
  auto p = proxy::Proxy::create(popts, store_, proxy::systemResolver());
  if (!p) return base::fail(base::Code::kInternal, p.error().message, "proxy listener");
  px_ = std::move(*p);
  px_->start();
  services_.proxy = px_.get();
  proxy_start_us_ += elapsedUs(t);
  return {};
}

base::Result<void> RunJob::beforeStart() {
  if (const auto& s = loadSecrets(); !s) return base::fail(base::Code::kIo, s.error(), "secrets");
  // Start-up garbage collection: leftovers of a sluice that was SIGKILLed.
  auto t = std::chrono::steady_clock::now();
  if (full_isolation_) (void)rn::collectGarbage();
  gc_us_ = elapsedUs(t);
  if (!store_) return {};
  t = std::chrono::steady_clock::now();
  auto r = store_->ready();
  audit_wait_us_ = elapsedUs(t);
  if (!r) return std::unexpected(rn::setupFailure("audit store", r.error()));
  return {};
}

execution::ExecIo RunJob::io() {
  execution::ExecIo io;
  if (!o_.json)
    io.live = [](int stream, std::string_view data) {
      std::FILE* f = stream == 1 ? stdout : stderr;
      std::fwrite(data.data(), 1, data.size(), f);
      std::fflush(f);
    };
  io.before_start = [this] { return beforeStart(); };
  return io;
}

// Still an execution, with a receipt (exit 125 for a failed setup step, 126/127 for a command
// that cannot start), so the agent (--json) and the audit trail see what was attempted and why
// it did not run. A store that failed to open cannot record it.
void RunJob::reportFailure(const base::Error& e) {
  const bool setup = !rn::commandNotStarted(e);
  std::cerr << "sluice run: "
            << (setup ? "setup failed at step '" + e.where + "': " + e.message : e.message) << "\n";
}

// The receipt where it was asked for, and the summary.
int RunJob::output(execution::Receipt& receipt) {
  timer_.mark("cli: durable audit commit (rest of)");
  if (!o_.receipt_file.empty()) {
    std::ofstream out(o_.receipt_file);
    out << base::dumpJson(receipt.json, 2) << "\n";
    if (!out) return fail("receipt", o_.receipt_file + ": cannot write");
  }
  if (o_.json)
    std::cout << base::dumpJson(receipt.json) << std::endl;
  else {
    std::cerr << summaryLine(receipt.result, receipt.json) << "\n";
    if (sandbox_) printRefusals(receipt.json, *sandbox_);
  }
  if (o_.learn)
    std::cerr << kLearnBanner << " ("
              << receipt.json.value("network", nlohmann::json::object()).value("would_deny", 0)
              << " would_deny; review with sluice policy learn --execution " << id_ << ")\n";
  timer_.mark("cli: output receipt");
  return 0;
}

int RunJob::run() {
  // First, while this process is single-threaded and holds no policy, secret or key: a helper
  // starts building the sandbox's namespaces alongside everything below (runner/sandbox.hpp).
  auto prepared = rn::prepareSandbox();
  if (!prepared) return fail("sandbox", prepared.error().message);
  prepared_ = std::move(*prepared);
  timer_.mark("cli: fork namespace helper");
  if (int rc = prepare(); rc != 0) return rc;
  if (o_.learn) std::cerr << kLearnBanner << "\n";
  if (int rc = openSandbox(); rc != 0) return rc;
  if (int rc = startAuditStore(); rc != 0) return rc;
  timer_.mark("cli: start opening audit store");
  // The program's own output goes to our stdout/stderr: keep the components' info logs out of
  // it (SLUICE_LOG_LEVEL=info|debug brings them back).
  if (const char* lvl = std::getenv("SLUICE_LOG_LEVEL"))
    spdlog::set_level(spdlog::level::from_str(lvl));
  else
    spdlog::set_level(spdlog::level::warn);
  if (sandbox_->networkProxy() && !o_.approve_with.empty()) {
    services_.approvals = std::make_shared<proxy::ApprovalDesk>(store_);
    approver_ = std::make_unique<execution::ApproveWith>(services_.approvals, o_.approve_with, id_);
  }
  rn::installStopHandlers();
  // A reader that goes away (sluice run ... | head) must not kill sluice mid-run and leave the
  // sandbox to PR_SET_PDEATHSIG: ignore SIGPIPE; the program gets the default back.
  std::signal(SIGPIPE, SIG_IGN);
  auto receipt = sandbox_->exec(command_, io());
  timer_.add("cli: (during clone) proxy start + matcher compile", proxy_start_us_);
  timer_.add("cli: (during clone) gc of leftovers", gc_us_);
  timer_.add("cli: (during clone) waiting for the audit store to open", audit_wait_us_);
  if (!receipt) return fail(receipt.error().where, receipt.error().message);
  for (const auto& [phase, us] : receipt->result.phases) timer_.add(phase, us);
  timer_.reset();
  if (receipt->not_run) reportFailure(*receipt->not_run);
  if (int rc = output(*receipt); rc != 0) return rc;
  sandbox_.reset();
  px_.reset();
  timer_.mark("cli: proxy teardown");
  store_.reset();
  timer_.mark("cli: close audit store");
  return receipt->result.sluiceExitStatus();
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
  run->add_option("--shadow-policy", o->shadow_policy,
                  "Candidate policy decided alongside, recorded in each row, never enforced");
  run->add_flag("--learn", o->learn,
                "Learn mode: let through what no rule explicitly denies, recorded as would_deny");
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
