// One execution (sandbox.hpp): open, exec, close.
#include "sluice/execution/sandbox.hpp"

#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "sluice/execution/wiring.hpp"
#include "sluice/policy/host_mounts.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/runner/environment.hpp"

namespace sluice::execution {
namespace rn = sluice::runner;
namespace pol = sluice::policy;
using base::Code;

namespace {

base::Error invalid(std::string where, std::string message) {
  return base::Error{Code::kInvalidArgument, std::move(message), std::move(where)};
}

// One exec's share of a session's traffic: the counters since `before`, and the denials
// recorded after it.
proxy::Stats statsSince(const proxy::Stats& before, const proxy::Stats& after) {
  proxy::Stats delta;
  delta.allowed = after.allowed - before.allowed;
  delta.denied = after.denied - before.denied;
  delta.bytes_out = after.bytes_out - before.bytes_out;
  delta.bytes_in = after.bytes_in - before.bytes_in;
  delta.dns_queries = after.dns_queries - before.dns_queries;
  delta.dns_denied = after.dns_denied - before.dns_denied;
  delta.would_deny = after.would_deny - before.would_deny;
  const std::size_t seen = std::min(before.denials.size(), after.denials.size());
  delta.denials.assign(after.denials.begin() + static_cast<std::ptrdiff_t>(seen),
                       after.denials.end());
  // The generation in force when the exec began, and every one after it.
  const std::uint64_t first =
      before.policy_generations.empty() ? 0 : before.policy_generations.back().generation;
  for (const auto& g : after.policy_generations)
    if (g.generation >= first) delta.policy_generations.push_back(g);
  return delta;
}

// `e` under the code this boundary answers with (its message, errno and cause_code kept).
base::Error recoded(base::Error e, Code code) {
  e.code = code;
  return e;
}

}  // namespace

struct Sandbox::State {
  explicit State(Services& services) : sv(services) {}

  Services& sv;
  std::shared_ptr<const pol::Workflow> workflow;
  SandboxKind kind = SandboxKind::kOneShot;
  std::string id;
  std::shared_ptr<const pol::Matcher> shadow;  // OpenOptions::shadow
  bool learn = false;                          // OpenOptions::learn
  std::string next_exec_id;
  bool network_proxy = false;
  rn::Limits limits;
  // The sandbox gets VAR=<random token> per rule with inject.placeholder_env; the proxy swaps
  // the token for the secret only on that rule's requests.
  std::vector<proxy::Placeholder> placeholders;
  // The policy in force: compiled when the first listener arrives (a one-shot run's start
  // overlaps it), replaced by a live update (replacePolicy). Guarded by matcher_mu.
  std::shared_ptr<const pol::Matcher> matcher;
  mutable std::mutex matcher_mu;
  std::shared_ptr<const pol::Matcher> policyInForce();
  // The synthetic DNS names: written by the sandbox's DNS server, read by its listeners.
  std::shared_ptr<proxy::SyntheticNames> names = std::make_shared<proxy::SyntheticNames>();
  std::vector<std::pair<std::string, std::string>> extra_files;
  std::unique_ptr<rn::SandboxSession> box;
  std::once_flag network_once;
  std::optional<base::Error> network_error;  // start_network failed: the run's setup failure
  bool ran = false;                          // a one-shot's (or runOnce's) command has run
  bool closed = false;

  // The durable commit of one receipt, in flight; its record must outlive the wait.
  struct Pending {
    Receipt receipt;
    std::unique_ptr<audit::ExecutionRecord> record;
    std::optional<audit::PendingExecution> commit;
  };

  proxy::ListenerIdentity identity();
  std::expected<void, std::string> onListener(int fd);
  std::expected<void, std::string> onDns(int udp, int tcp, int blocked);
  base::Result<void> beforeStart(const ExecIo& io);
  base::Result<void> build();
  base::Result<void> checkEnv(const std::vector<std::string>& env) const;
  rn::ReceiptContext context() const;
  void settle(const rn::RunSpec& described, const rn::RunResult& r, const ExecIo& io,
              const proxy::Stats* net, bool in_session, Pending& out);
  base::Result<Receipt> complete(Pending& p);
  void endExecution(const std::string& exec_id);
  base::Result<Receipt> execOneShot(const Command& cmd, const ExecIo& io);
  base::Result<Receipt> execInSession(const Command& cmd, const ExecIo& io, bool once);
  rn::RunSpec describe(const Command& cmd, const std::string& exec_id) const;
};

std::shared_ptr<const pol::Matcher> Sandbox::State::policyInForce() {
  std::lock_guard lock(matcher_mu);
  if (!matcher) matcher = pol::Matcher::compile(workflow);
  return matcher;
}

proxy::ListenerIdentity Sandbox::State::identity() {
  proxy::ListenerIdentity i{id, policyInForce(), sv.secrets, placeholders};
  i.names = names;  // redirected connections are decided by the names DNS gave out
  i.approvals = sv.approvals;
  i.shadow = shadow;
  i.learn = learn;
  return i;
}

// Called twice (127.0.0.1:3128, then [::1]:3128): one proxy adopts both.
std::expected<void, std::string> Sandbox::State::onListener(int fd) {
  std::call_once(network_once, [this] {
    if (sv.start_network)
      if (auto r = sv.start_network(); !r) network_error = r.error();
  });
  if (network_error || !sv.proxy) {  // reported by beforeStart, as its step
    ::close(fd);
    return {};
  }
  if (auto r = sv.proxy->adoptListener(fd, identity()); !r)
    return std::unexpected(r.error().message);
  return {};
}

std::expected<void, std::string> Sandbox::State::onDns(int udp, int tcp, int blocked) {
  if (network_error || !sv.proxy) {
    ::close(udp);
    ::close(tcp);
    ::close(blocked);
    return {};
  }
  const proxy::ListenerIdentity i = identity();
  if (auto r = sv.proxy->adoptBlockedLog(blocked, i); !r) {
    ::close(udp);
    ::close(tcp);
    return std::unexpected(r.error().message);
  }
  if (auto r = sv.proxy->adoptDns(udp, tcp, i); !r) return std::unexpected(r.error().message);
  return {};
}

// The policy's sandbox.mounts against the secrets this process holds: no mount may show the
// secrets file's directory or a secret's file (the policy check cannot know where they are).
static base::Result<void> mountsKeepSecrets(const pol::Workflow& w,
                                            const pol::SecretStore* secrets) {
  if (!secrets || w.sandbox.mounts.empty()) return {};
  const std::vector<std::string> paths = secrets->secretPaths();
  for (const auto& m : w.sandbox.mounts)
    if (auto bad = pol::mountSourceProblem(m.source, paths))
      return base::fail(Code::kInvalidArgument, "sandbox.mounts: source " + m.source + " " + *bad,
                        "sandbox.mounts");
  return {};
}

// Nothing runs unaudited: the program starts only once the store is healthy.
base::Result<void> Sandbox::State::beforeStart(const ExecIo& io) {
  if (auto ok = mountsKeepSecrets(*workflow, sv.secrets.get()); !ok) return ok;
  if (network_error) return std::unexpected(rn::setupFailure(network_error->where, *network_error));
  if (io.before_start)
    if (auto r = io.before_start(); !r) return r;
  if (sv.store && !sv.store->healthy())
    return base::fail(Code::kIo, "the audit store has failed; refusing to run unaudited",
                      "audit store");
  return {};
}

// A session's sandbox: built now, its listeners under the sandbox's id (its budgets).
base::Result<void> Sandbox::State::build() {
  rn::SessionSpec spec;
  spec.session_id = id;
  spec.limits = limits;
  spec.network_proxy = network_proxy;
  spec.extra_files = extra_files;
  spec.mounts = hostMounts(*workflow);
  for (const auto& ph : placeholders) spec.env.push_back(ph.env + "=" + ph.token);
  rn::ListenerCallback on_listener;
  rn::DnsCallback on_dns;
  if (network_proxy) {
    on_listener = [this](int fd) { return onListener(fd); };
    on_dns = [this](int udp, int tcp, int blocked) { return onDns(udp, tcp, blocked); };
  }
  auto box =
      rn::SandboxSession::start(spec, on_listener, on_dns, sv.prepared ? sv.prepared() : nullptr);
  if (box && network_error)
    box = std::unexpected(rn::setupFailure(network_error->where, *network_error));
  if (!box) {
    if (network_proxy && sv.proxy) sv.proxy->closeExecution(id);
    return std::unexpected(recoded(std::move(box.error()), Code::kInternal));
  }
  this->box = std::move(*box);
  return {};
}

// The placeholder check and the runner's own, written once for every surface.
base::Result<void> Sandbox::State::checkEnv(const std::vector<std::string>& env) const {
  auto checked = sandboxEnvironment(env, placeholders, network_proxy);
  if (!checked) return std::unexpected(invalid("env", checked.error()));
  return {};
}

rn::ReceiptContext Sandbox::State::context() const {
  rn::ReceiptContext ctx;
  ctx.workflow = workflow->name;
  ctx.policy_sha256 = workflow->sha256;
  ctx.network_mode = network_proxy ? "proxy" : "none";
  ctx.learn = learn;
  return ctx;
}

// The receipt of a finished execution, and its durable commit started (so that the commit's
// fsync overlaps what the caller does next: a one-shot sandbox's teardown).
void Sandbox::State::settle(const rn::RunSpec& described, const rn::RunResult& r, const ExecIo& io,
                            const proxy::Stats* net, bool in_session, Pending& out) {
  rn::ReceiptContext ctx = context();
  if (net) addNetwork(ctx, *net);
  out.receipt.result = r;
  out.receipt.json = rn::buildReceipt(described, r, ctx);
  if (io.record_caller) out.receipt.json["caller"] = io.caller;
  if (in_session) out.receipt.json["session_id"] = id;
  if (!sv.store) return;
  // A run the failed store itself refused cannot be recorded in it.
  if (sv.answer_unrecorded && out.receipt.not_run && !rn::commandNotStarted(*out.receipt.not_run) &&
      !sv.store->healthy())
    return;
  out.record = std::make_unique<audit::ExecutionRecord>(executionRecord(out.receipt.json, r, ctx));
  out.commit.emplace(sv.store->beginRecordExecution(*out.record));
}

base::Result<Receipt> Sandbox::State::complete(Pending& p) {
  if (!p.commit) return std::move(p.receipt);
  auto hash = p.commit->wait();
  if (sv.on_committed) sv.on_committed();
  if (!hash) {
    // The store's own code may be finer (kConflict ...); to a caller an unrecorded receipt is
    // an I/O failure of sluice (500, exit 125), with SQLite's code and errno kept beside it.
    base::Error e = std::move(hash.error());
    e.code = Code::kIo;
    e.where = "audit store";
    return std::unexpected(std::move(e));
  }
  p.receipt.json["hash"] = *hash;
  return std::move(p.receipt);
}

// Approvals still pending are refused (execution_ended).
void Sandbox::State::endExecution(const std::string& exec_id) {
  if (sv.approvals) sv.approvals->endExecution(exec_id);
}

rn::RunSpec Sandbox::State::describe(const Command& cmd, const std::string& exec_id) const {
  rn::RunSpec spec;
  spec.argv = cmd.argv;
  spec.limits = limits;
  if (cmd.limits.timeout) spec.limits.timeout = *cmd.limits.timeout;
  spec.network_proxy = network_proxy;
  spec.mounts = hostMounts(*workflow);  // the session's binds, for the receipt
  spec.execution_id = exec_id;
  return spec;
}

Sandbox::Sandbox(std::unique_ptr<State> state) : s_(std::move(state)) {}

Sandbox::~Sandbox() { close(); }

base::Result<std::unique_ptr<Sandbox>> Sandbox::open(Services& services, OpenOptions o) {
  auto st = std::make_unique<State>(services);
  const pol::Workflow& w = *o.workflow;
  st->workflow = std::move(o.workflow);
  st->kind = o.kind;
  st->shadow = std::move(o.shadow);
  st->learn = o.learn;
  st->id = o.id.empty() ? newExecutionId() : o.id;
  st->network_proxy = w.sandbox.network == pol::NetworkMode::kProxy;
  auto limits = workflowLimits(w, {});
  if (!limits) return std::unexpected(invalid("limits", limits.error()));
  st->limits = *limits;
  if (st->network_proxy) st->placeholders = proxy::makePlaceholders(w);
  if (services.ca) st->extra_files = caBundleFiles(w, *services.ca);
  if (auto ok = mountsKeepSecrets(w, services.secrets.get()); !ok)
    return std::unexpected(ok.error());
  if (services.store) services.store->recordPolicy(w.sha256, w.name, w.yaml_text);
  if (o.kind == SandboxKind::kSession) {
    if (auto built = st->build(); !built) return std::unexpected(built.error());
    st->next_exec_id = newExecutionId();
  } else {
    st->next_exec_id = st->id;
  }
  return std::unique_ptr<Sandbox>(new Sandbox(std::move(st)));
}

base::Result<void> Sandbox::check(const Command& cmd) const {
  if (cmd.argv.empty()) return std::unexpected(invalid("argv", "is required"));
  if (auto env = s_->checkEnv(cmd.env); !env) return env;
  if (s_->kind == SandboxKind::kOneShot) {
    auto limits = workflowLimits(*s_->workflow, cmd.limits);
    if (!limits) return std::unexpected(invalid("limits", limits.error()));
    return {};
  }
  // A session's sandbox has its limits already: an exec may only tighten its timeout.
  const auto& o = cmd.limits;
  if (o.cpu_time || o.memory || o.pids || o.output || o.disk || o.file_size || o.open_files)
    return std::unexpected(invalid("limits", "only the timeout can be set for an exec"));
  if (o.timeout && s_->limits.timeout.count() > 0 && *o.timeout > s_->limits.timeout)
    return std::unexpected(invalid("timeout", "looser than the workflow's (may only tighten)"));
  return {};
}

base::Result<Receipt> Sandbox::exec(const Command& cmd, const ExecIo& io) {
  if (auto ok = check(cmd); !ok) return std::unexpected(ok.error());
  if (s_->kind == SandboxKind::kOneShot) return s_->execOneShot(cmd, io);
  return s_->execInSession(cmd, io, false);
}

base::Result<Receipt> Sandbox::runOnce(const Command& cmd, const ExecIo& io) {
  if (s_->kind != SandboxKind::kSession)
    return base::fail(Code::kInternal, "runOnce needs a session sandbox");
  if (auto ok = check(cmd); !ok) return std::unexpected(ok.error());
  return s_->execInSession(cmd, io, true);
}

base::Result<Receipt> Sandbox::State::execOneShot(const Command& cmd, const ExecIo& io) {
  if (ran) return base::fail(Code::kConflict, "a one-shot sandbox runs one command");
  ran = true;
  rn::RunSpec spec;
  spec.argv = cmd.argv;
  spec.limits = *workflowLimits(*workflow, cmd.limits);  // check() passed
  spec.network_proxy = network_proxy;
  spec.inputs = cmd.inputs;
  spec.mounts = hostMounts(*workflow);
  spec.output_dir = cmd.output_dir;
  spec.execution_id = id;
  spec.extra_files = extra_files;
  spec.stdin_data = cmd.stdin_data;
  spec.files = cmd.files;
  spec.env = *sandboxEnvironment(cmd.env, placeholders, network_proxy);
  Pending p;
  // The sandbox is gone once the result is final: its traffic is closed and counted, and the
  // receipt's commit started before the teardown.
  auto finish = [&](const rn::RunResult& r) {
    endExecution(id);
    proxy::Stats net;
    if (network_proxy && sv.proxy) {
      sv.proxy->closeExecution(id);
      net = sv.proxy->stats(id);
      if (sv.proxy_per_execution) sv.proxy->stop();
    }
    settle(spec, r, io, network_proxy ? &net : nullptr, false, p);
  };
  rn::RunHooks hooks;
  if (network_proxy) {
    hooks.on_listener = [this](int fd) { return onListener(fd); };
    hooks.on_dns = [this](int udp, int tcp, int blocked) { return onDns(udp, tcp, blocked); };
  }
  hooks.live = io.live;
  hooks.stop_fd = io.stop_fd;
  hooks.before_start = [&] { return beforeStart(io); };
  hooks.on_result = finish;
  if (sv.approvals && io.record_caller) sv.approvals->attribute(id, {"", "", io.caller});
  auto result = rn::runSandboxed(spec, hooks, sv.prepared ? sv.prepared() : nullptr);
  if (!result) {
    p.receipt.not_run = result.error();
    finish(failedResult(result.error(), spec, rn::sandboxSupported()));
  }
  return complete(p);
}

// One exec in a session's sandbox; `once`: a pooled run, the sandbox's only execution.
base::Result<Receipt> Sandbox::State::execInSession(const Command& cmd, const ExecIo& io,
                                                    bool once) {
  if (closed || (once && ran)) return base::fail(Code::kNotFound, "the sandbox has ended");
  ran = true;
  const std::string exec_id = once ? id : std::exchange(next_exec_id, newExecutionId());
  for (const auto& f : cmd.files)
    if (auto w = box->writeFile(f.path, f.content); !w)
      return std::unexpected(invalid("files." + f.path, w.error()));
  if (auto gate = beforeStart(io); !gate)
    return std::unexpected(recoded(std::move(gate.error()), Code::kIo));
  rn::ExecSpec spec;
  spec.argv = cmd.argv;
  spec.env = cmd.env;
  if (cmd.cwd) spec.cwd = *cmd.cwd;
  spec.stdin_data = cmd.stdin_data;
  spec.timeout = cmd.limits.timeout;
  spec.execution_id = exec_id;
  proxy::Stats before;
  if (network_proxy && !once) before = sv.proxy->stats(id);
  // Approvals raised while this exec runs name it, and so do its network rows.
  if (sv.approvals) sv.approvals->attribute(id, {once ? "" : exec_id, once ? "" : id, io.caller});
  if (network_proxy && !once) sv.proxy->setCurrentExecution(id, exec_id);
  auto result = box->exec(spec, rn::ExecHooks{io.live, io.stop_fd});
  endExecution(exec_id);
  if (network_proxy && !once) sv.proxy->setCurrentExecution(id, "");
  if (sv.approvals && !once) sv.approvals->attribute(id, {"", id, io.caller});
  const rn::RunSpec described = describe(cmd, exec_id);
  Pending p;
  if (!result) {
    p.receipt.not_run = result.error();
    result = failedResult(result.error(), described, rn::sandboxSupported());
  }
  if (once && result->artifacts.empty()) result->artifacts = box->artifacts();
  proxy::Stats net;
  if (network_proxy && once) sv.proxy->closeExecution(id);
  if (network_proxy) net = once ? sv.proxy->stats(id) : statsSince(before, sv.proxy->stats(id));
  settle(described, *result, io, network_proxy ? &net : nullptr, !once, p);
  return complete(p);
}

void Sandbox::close() {
  State& s = *s_;
  if (s.closed) return;
  s.closed = true;
  if (s.box) s.box->end();
  s.endExecution(s.id);
  if (s.network_proxy && s.sv.proxy) s.sv.proxy->closeExecution(s.id);
}

std::shared_ptr<const pol::Matcher> Sandbox::matcher() const { return s_->policyInForce(); }

base::Result<std::uint64_t> Sandbox::replacePolicy(std::shared_ptr<const pol::Matcher> next) {
  State& s = *s_;
  if (!s.network_proxy || !s.sv.proxy)
    return std::unexpected(
        base::Error{base::Code::kConflict, "sandbox " + s.id + " has no proxied network"});
  // One swap at a time, so the proxy's generation and matcher() name the same policy.
  std::lock_guard lock(s.matcher_mu);
  auto generation = s.sv.proxy->replacePolicy(s.id, next);
  if (!generation) return std::unexpected(generation.error());
  s.matcher = std::move(next);
  return *generation;
}

const std::string& Sandbox::id() const { return s_->id; }
const std::string& Sandbox::nextExecutionId() const { return s_->next_exec_id; }
const pol::Workflow& Sandbox::workflow() const { return *s_->workflow; }
const std::shared_ptr<const pol::Workflow>& Sandbox::workflowShared() const { return s_->workflow; }
bool Sandbox::networkProxy() const { return s_->network_proxy; }
const rn::Limits& Sandbox::limits() const { return s_->limits; }
rn::SandboxSession* Sandbox::session() { return s_->box.get(); }

proxy::Stats Sandbox::networkStats() const {
  if (!s_->network_proxy || !s_->sv.proxy) return {};
  return s_->sv.proxy->stats(s_->id);
}

base::Result<void> checkUpstreamCas(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec) || ::access(f.c_str(), R_OK) != 0)
      return base::fail(Code::kInvalidArgument, f + ": not a readable file", "upstream CA");
  }
  return {};
}

base::Result<bool> checkIsolation(std::string* warning) {
  std::string why;
  if (rn::sandboxSupported(&why)) return true;
  if (::geteuid() == 0) return base::fail(Code::kInternal, why, "sandbox");
  // Unprivileged: user namespaces still give every namespace, seccomp and Landlock, but no
  // cgroups. Say what is not enforced.
  if (warning)
    *warning =
        "not root: running in a user namespace without cgroups; the memory limit is not "
        "enforced, pids is enforced by RLIMIT_NPROC only, and cpu_time per process only";
  return false;
}

}  // namespace sluice::execution
