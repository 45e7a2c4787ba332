// Sessions (sessions.hpp).
#include "sessions.hpp"

#include <unistd.h>

#include "pool.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/json.hpp"
#include "sluice/execution/wiring.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/runner/environment.hpp"
#include "sluice/runner/session.hpp"

namespace sluice::serve {
namespace rn = sluice::runner;
namespace pol = sluice::policy;
using nlohmann::json;

namespace {

ApiError bad(const std::string& what) { return ApiError{400, "bad_request", what, ""}; }

std::expected<std::chrono::milliseconds, ApiError> duration(const json& body, const char* key,
                                                            std::chrono::milliseconds dflt) {
  if (!body.contains(key)) return dflt;
  if (!body[key].is_string()) return std::unexpected(bad(std::string(key) + ": must be a string"));
  auto d = pol::parseDuration(body[key].get<std::string>());
  if (!d) return std::unexpected(bad(std::string(key) + ": " + d.error()));
  if (d->count() <= 0) return std::unexpected(bad(std::string(key) + ": must be positive"));
  return *d;
}

// One exec's share of its session's traffic: the counters since `before`, and the denials
// recorded after it.
proxy::Stats statsSince(const proxy::Stats& before, const proxy::Stats& after) {
  proxy::Stats delta;
  delta.allowed = after.allowed - before.allowed;
  delta.denied = after.denied - before.denied;
  delta.bytes_out = after.bytes_out - before.bytes_out;
  delta.bytes_in = after.bytes_in - before.bytes_in;
  delta.dns_queries = after.dns_queries - before.dns_queries;
  delta.dns_denied = after.dns_denied - before.dns_denied;
  const std::size_t seen = std::min(before.denials.size(), after.denials.size());
  delta.denials.assign(after.denials.begin() + static_cast<std::ptrdiff_t>(seen),
                       after.denials.end());
  return delta;
}

// "24h", "90m", "30s" or "1500ms": the largest unit that says it exactly.
std::string spoken(std::chrono::milliseconds d) {
  using namespace std::chrono;
  if (d.count() % duration_cast<milliseconds>(hours(1)).count() == 0)
    return std::to_string(duration_cast<hours>(d).count()) + "h";
  if (d.count() % 60000 == 0) return std::to_string(duration_cast<minutes>(d).count()) + "m";
  if (d.count() % 1000 == 0) return std::to_string(duration_cast<seconds>(d).count()) + "s";
  return std::to_string(d.count()) + "ms";
}

// A file path of the API ("work/data.csv") as a sandbox path ("/work/data.csv"), %XX decoded.
std::expected<std::string, ApiError> sandboxPath(const std::string& url_path) {
  std::string out = "/";
  for (std::size_t i = 0; i < url_path.size(); ++i) {
    char c = url_path[i];
    if (c == '%' && i + 2 < url_path.size() &&
        std::isxdigit(static_cast<unsigned char>(url_path[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(url_path[i + 2]))) {
      out += static_cast<char>(std::stoi(url_path.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += c;
    }
  }
  if (out.find('\0') != std::string::npos) return std::unexpected(bad("path: contains NUL"));
  return out;
}

// Maps a runner file error to the API's: a missing file is 404, one over the sandbox's disk or
// file-size limit 413, anything refused 400.
ApiError fileError(const std::string& message) {
  if (message.find("No such file") != std::string::npos ||
      message.find("not found") != std::string::npos)
    return ApiError{404, "not_found", message, ""};
  if (message.find("No space") != std::string::npos ||
      message.find("too large") != std::string::npos ||
      message.find("File too large") != std::string::npos)
    return ApiError{413, "payload_too_large", message, ""};
  return ApiError{400, "bad_request", message, ""};
}

}  // namespace

struct SessionManager::Session {
  std::string id;
  std::string caller;
  std::shared_ptr<const pol::Workflow> workflow;
  std::shared_ptr<const pol::Matcher> matcher;
  std::vector<proxy::Placeholder> placeholders;
  rn::Limits limits;
  bool network_proxy = false;
  std::chrono::system_clock::time_point created_at, expires_at;
  std::chrono::milliseconds idle_timeout{};
  std::chrono::steady_clock::time_point last_used;
  std::chrono::steady_clock::time_point deadline;  // TTL
  std::unique_ptr<rn::SandboxSession> box;
  std::vector<std::string> execs;
  bool pooled = false;  // its sandbox came from the warm pool (replenished after its first exec)
  std::mutex op;        // one exec or file operation at a time
  bool ended = false;   // guarded by op
  int busy = 0;         // guarded by the manager's mu_: operations in flight (not idle)
  std::shared_ptr<void> hold;  // its unit of the manager's Quota, given back by finish()
};

// Retry-After of a full session quota: sessions end by their client, idle timeout or TTL.
constexpr unsigned kSessionRetryAfter = 5;

SessionManager::SessionManager(Engine& engine, std::size_t max_sessions, std::size_t per_caller,
                               std::chrono::milliseconds max_ttl)
    : engine_(engine),
      quota_(max_sessions, per_caller == 0 ? max_sessions : per_caller, "sessions open",
             "--max-sessions", "too_many_sessions", kSessionRetryAfter),
      max_ttl_(max_ttl) {}

SessionManager::~SessionManager() { endAll("shutdown"); }

std::size_t SessionManager::active() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

std::expected<json, ApiError> SessionManager::create(const Caller& caller, const json& body) {
  if (!body.is_object()) return std::unexpected(bad("body: must be a JSON object"));
  for (const auto& [key, v] : body.items())
    if (key != "workflow" && key != "idle_timeout" && key != "ttl")
      return std::unexpected(bad(key + ": unknown field"));
  if (!body.contains("workflow") || !body["workflow"].is_string())
    return std::unexpected(bad("workflow: is required (a string)"));
  const std::string name = body["workflow"];
  auto w = engine_.workflow(name);
  if (!w)
    return std::unexpected(ApiError{404, "not_found", "workflow '" + name + "' is not served", ""});
  // Defaults within the ceiling; an explicit value above it is refused, not cut, so the
  // caller is not surprised by a session that ends early.
  auto idle = duration(body, "idle_timeout",
                       std::min<std::chrono::milliseconds>(std::chrono::minutes(5), max_ttl_));
  if (!idle) return std::unexpected(idle.error());
  auto ttl =
      duration(body, "ttl", std::min<std::chrono::milliseconds>(std::chrono::hours(1), max_ttl_));
  if (!ttl) return std::unexpected(ttl.error());
  for (const auto& [key, d] : {std::pair{"idle_timeout", *idle}, std::pair{"ttl", *ttl}})
    if (d > max_ttl_)
      return std::unexpected(bad(std::string(key) + ": " + spoken(d) +
                                 " is longer than this daemon allows (--max-session-ttl " +
                                 spoken(max_ttl_) + ")"));
  // Held from before the sandbox is built: concurrent creates cannot all pass the count.
  auto hold = quota_.acquire(caller.name);
  if (!hold) return std::unexpected(hold.error());
  auto s = std::make_shared<Session>();
  s->hold = std::move(*hold);
  s->caller = caller.name;
  s->workflow = w;
  s->matcher = pol::Matcher::compile(w);
  s->network_proxy = w->sandbox.network == pol::NetworkMode::kProxy;
  s->idle_timeout = *idle;
  s->created_at = std::chrono::system_clock::now();
  s->expires_at =
      s->created_at + std::chrono::duration_cast<std::chrono::system_clock::duration>(*ttl);
  s->last_used = std::chrono::steady_clock::now();
  s->deadline = s->last_used + *ttl;
  engine_.store().recordPolicy(w->sha256, w->name, w->yaml_text);
  if (auto started = startSandbox(*s); !started) return std::unexpected(started.error());
  engine_.approvals().attribute(s->id, {"", s->id, s->caller});
  {
    std::lock_guard lock(mu_);
    sessions_[s->id] = s;
  }
  engine_.metrics().sessionOpened();
  return json{{"id", s->id},
              {"workflow", w->name},
              {"created_at", rn::formatTimestamp(s->created_at)},
              {"expires_at", rn::formatTimestamp(s->expires_at)}};
}

// The session's sandbox: a prepared one from the warm pool when it has one of this very policy
// (the session then takes its id, which its listeners were attached with), else one built now.
std::expected<void, ApiError> SessionManager::startSandbox(Session& s) {
  const pol::Workflow& w = *s.workflow;
  if (Pool* pool = engine_.pool())
    if (auto p = pool->take(w)) {
      s.pooled = true;
      s.id = p->id;
      s.limits = p->limits;
      s.placeholders = p->placeholders;  // the tokens its environment already holds
      s.box = std::move(p->box);
      return {};
    }
  s.id = Engine::newId("se-");
  auto limits = engine_.limitsFor(w, {});
  if (!limits) return std::unexpected(limits.error());
  s.limits = *limits;
  if (s.network_proxy) s.placeholders = proxy::makePlaceholders(w);
  rn::SessionSpec spec;
  spec.session_id = s.id;
  spec.limits = s.limits;
  spec.network_proxy = s.network_proxy;
  spec.extra_files = engine_.extraFilesFor(w);
  for (const auto& ph : s.placeholders) spec.env.push_back(ph.env + "=" + ph.token);
  // The session's listeners and DNS, under the session's id (its budgets); while an exec runs,
  // their audit rows name the exec (Proxy::setCurrentExecution).
  Engine::NetworkHooks net;
  if (s.network_proxy)
    net = engine_.networkHooks({s.id, s.matcher, engine_.secrets(), s.placeholders});
  auto box =
      rn::SandboxSession::start(spec, net.on_listener, net.on_dns, engine_.preparedSandbox());
  if (!box) {
    if (s.network_proxy) engine_.proxy().closeExecution(s.id);
    const auto& e = box.error();
    return std::unexpected(ApiError{
        500, "internal", "session setup failed at step '" + e.step + "': " + e.message, ""});
  }
  s.box = std::move(*box);
  return {};
}

std::expected<std::shared_ptr<SessionManager::Session>, ApiError> SessionManager::find(
    const Caller& caller, const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  // Another caller's session does not exist, for this caller.
  if (it == sessions_.end() || it->second->caller != caller.name)
    return std::unexpected(ApiError{404, "not_found", "no session " + id, ""});
  return it->second;
}

std::expected<json, ApiError> SessionManager::exec(const Caller& caller, const std::string& id,
                                                   const json& body,
                                                   const std::function<void(std::string)>& lines,
                                                   int stop_fd) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  Session& s = **found;
  if (!body.is_object()) return std::unexpected(bad("body: must be a JSON object"));
  rn::ExecSpec spec;
  sluice::execution::Command cmd;
  for (const auto& [key, v] : body.items()) {
    auto common = parseCommandField(key, v, cmd);
    if (!common) return std::unexpected(common.error());
    if (*common) continue;
    if (key == "cwd") {
      if (!v.is_string()) return std::unexpected(bad("cwd: must be a string"));
      spec.cwd = v.get<std::string>();
    } else if (key == "timeout") {
      auto d = duration(body, "timeout", {});
      if (!d) return std::unexpected(d.error());
      if (s.limits.timeout.count() > 0 && *d > s.limits.timeout)
        return std::unexpected(bad("timeout: looser than the workflow's (may only tighten)"));
      spec.timeout = *d;
    } else {
      return std::unexpected(bad(key + ": unknown field"));
    }
  }
  spec.argv = std::move(cmd.argv);
  spec.stdin_data = std::move(cmd.stdin_data);
  spec.env = std::move(cmd.env);
  if (spec.argv.empty()) return std::unexpected(bad("argv: is required"));
  for (const auto& ph : s.placeholders)
    for (const std::string& kv : spec.env)
      if (kv.substr(0, kv.find('=')) == ph.env)
        return std::unexpected(bad("env." + ph.env + ": is set by rule '" + ph.rule_id +
                                   "' (inject.placeholder_env)"));
  if (auto env = rn::buildEnvironment(spec.env, s.network_proxy); !env)
    return std::unexpected(bad("env: " + env.error()));
  spec.execution_id = Engine::newId("ex-");

  std::lock_guard op(s.op);
  if (s.ended) return std::unexpected(ApiError{404, "not_found", "no session " + id, ""});
  {
    std::lock_guard lock(mu_);
    ++s.busy;
  }
  proxy::Stats before;
  if (s.network_proxy) before = engine_.proxy().stats(s.id);
  rn::ExecHooks hooks;
  hooks.stop_fd = stop_fd;
  if (lines) {
    engine_.tee().subscribe(spec.execution_id, lines);
    hooks.live = [&](int stream, std::string_view data) {
      lines(base::dumpJson(
          json{{"type", stream == 1 ? "stdout" : "stderr"}, {"data", std::string(data)}}));
    };
  }
  // Approvals raised while this exec runs name it; those still pending when it ends are refused.
  // The exec's network rows (and approvals) name it, not the session.
  engine_.approvals().attribute(s.id, {spec.execution_id, s.id, s.caller});
  if (s.network_proxy) engine_.proxy().setCurrentExecution(s.id, spec.execution_id);
  auto result = s.box->exec(spec, hooks);
  engine_.approvals().endExecution(spec.execution_id);
  if (s.network_proxy) engine_.proxy().setCurrentExecution(s.id, "");
  engine_.approvals().attribute(s.id, {"", s.id, s.caller});
  if (lines) engine_.tee().unsubscribe(spec.execution_id);
  rn::RunSpec mirror;  // what the receipt describes
  mirror.argv = spec.argv;
  mirror.limits = s.limits;
  if (spec.timeout) mirror.limits.timeout = *spec.timeout;
  mirror.network_proxy = s.network_proxy;
  mirror.execution_id = spec.execution_id;
  if (!result)
    result = sluice::execution::failedResult(result.error(), mirror, rn::sandboxSupported());
  rn::ReceiptContext ctx;
  ctx.workflow = s.workflow->name;
  ctx.policy_sha256 = s.workflow->sha256;
  ctx.network_mode = s.network_proxy ? "proxy" : "none";
  if (s.network_proxy) {
    sluice::execution::addNetwork(ctx, statsSince(before, engine_.proxy().stats(s.id)));
  }
  auto receipt = engine_.commit(mirror, *result, ctx, Caller{s.caller, false}, s.id);
  s.execs.push_back(spec.execution_id);
  // The pool builds this session's replacement now that its first exec has answered.
  if (s.pooled && s.execs.size() == 1)
    if (Pool* pool = engine_.pool()) pool->replenish();
  std::lock_guard lock(mu_);
  --s.busy;
  s.last_used = std::chrono::steady_clock::now();
  return receipt;
}

// A file operation on a live session of `caller`, at sandbox path `path` (URL form), one at a
// time with its execs; it counts as activity (idle timeout).
template <typename T, typename Fn>
std::expected<T, ApiError> SessionManager::onFile(const Caller& caller, const std::string& id,
                                                  const std::string& path, Fn fn) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  auto p = sandboxPath(path);
  if (!p) return std::unexpected(p.error());
  Session& s = **found;
  std::lock_guard op(s.op);
  if (s.ended) return std::unexpected(ApiError{404, "not_found", "no session " + id, ""});
  {
    std::lock_guard lock(mu_);
    s.last_used = std::chrono::steady_clock::now();
  }
  return fn(s, *p);
}

std::expected<json, ApiError> SessionManager::putFile(const Caller& caller, const std::string& id,
                                                      const std::string& path,
                                                      const std::string& data) {
  return onFile<json>(
      caller, id, path, [&](Session& s, const std::string& p) -> std::expected<json, ApiError> {
        auto info = s.box->writeFile(p, data);
        if (!info) return std::unexpected(fileError(info.error()));
        return json{{"path", info->path}, {"bytes", info->bytes}, {"sha256", info->sha256}};
      });
}

std::expected<json, ApiError> SessionManager::putFileFrom(const Caller& caller,
                                                          const std::string& id,
                                                          const std::string& path, int fd) {
  return onFile<json>(
      caller, id, path, [&](Session& s, const std::string& p) -> std::expected<json, ApiError> {
        if (::lseek(fd, 0, SEEK_SET) != 0)
          return std::unexpected(ApiError{500, "internal", "the spooled upload is gone", ""});
        auto info = s.box->writeFileFrom(p, fd);
        if (!info) return std::unexpected(fileError(info.error()));
        return json{{"path", info->path}, {"bytes", info->bytes}, {"sha256", info->sha256}};
      });
}

std::expected<std::uint64_t, ApiError> SessionManager::uploadLimit(const Caller& caller,
                                                                   const std::string& id) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  return (*found)->limits.disk;
}

std::expected<SessionManager::FileBody, ApiError> SessionManager::getFile(const Caller& caller,
                                                                          const std::string& id,
                                                                          const std::string& path) {
  return onFile<FileBody>(caller, id, path,
                          [&](Session& s, const std::string& p) { return readOrList(s, p); });
}

std::expected<SessionManager::FileBody, ApiError> SessionManager::readOrList(
    Session& s, const std::string& path) {
  if (auto listing = s.box->listDir(path)) {
    json arr = json::array();
    for (const auto& f : *listing) {
      std::string name = f.path.substr(f.path.find_last_of('/') + 1);
      arr.push_back(
          {{"name", name}, {"type", f.directory ? "directory" : "file"}, {"bytes", f.bytes}});
    }
    return FileBody{"application/json", base::dumpJson(arr)};
  }
  auto bytes = s.box->readFile(path, engine_.maxFileBytes());
  if (!bytes) return std::unexpected(fileError(bytes.error()));
  return FileBody{"application/octet-stream", std::move(*bytes)};
}

json SessionManager::finish(Session& s, const std::string& ended_by) {
  // Caller holds s.op.
  json artifacts = json::array();
  for (const auto& a : s.box->artifacts())
    artifacts.push_back({{"path", a.path}, {"bytes", a.bytes}, {"sha256", a.sha256}});
  s.box->end();
  engine_.approvals().endExecution(s.id);
  proxy::Stats net;
  if (s.network_proxy) {
    engine_.proxy().closeExecution(s.id);
    net = engine_.proxy().stats(s.id);
  }
  json denials = json::array();
  for (const auto& d : net.denials)
    denials.push_back({{"host", d.host}, {"port", d.port}, {"rule", d.rule}, {"reason", d.reason}});
  json summary = {{"session_id", s.id},
                  {"workflow", s.workflow->name},
                  {"caller", s.caller},
                  {"execs", s.execs},
                  {"artifacts", artifacts},
                  {"network",
                   {{"allowed", net.allowed},
                    {"denied", net.denied},
                    {"bytes_out", net.bytes_out},
                    {"bytes_in", net.bytes_in},
                    {"denials", denials}}},
                  {"ended_by", ended_by},
                  {"created_at", rn::formatTimestamp(s.created_at)},
                  {"ended_at", rn::formatTimestamp(std::chrono::system_clock::now())}};
  // The session's own row in the chain: its summary is the receipt.
  audit::ExecutionRecord rec;
  rec.id = s.id;
  rec.workflow = s.workflow->name;
  rec.policy_sha256 = s.workflow->sha256;
  rec.argv_json = "[]";
  rec.started_at_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(s.created_at.time_since_epoch())
          .count();
  rec.ended_at_ms = base::nowMs();
  rec.artifacts_json = base::dumpJson(artifacts);
  rec.receipt_json = base::dumpJson(summary);
  if (auto hash = engine_.store().recordExecution(rec)) summary["hash"] = *hash;
  s.ended = true;
  s.hold.reset();
  engine_.metrics().sessionClosed();
  return summary;
}

std::expected<json, ApiError> SessionManager::end(const Caller& caller, const std::string& id) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  Session& s = **found;
  std::lock_guard op(s.op);
  if (s.ended) return std::unexpected(ApiError{404, "not_found", "no session " + id, ""});
  {
    std::lock_guard lock(mu_);
    sessions_.erase(id);
  }
  return finish(s, "client");
}

void SessionManager::reap() {
  std::vector<std::pair<std::shared_ptr<Session>, std::string>> due;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      Session& s = *it->second;
      std::string why;
      if (now >= s.deadline)
        why = "ttl";
      else if (s.busy == 0 && now - s.last_used >= s.idle_timeout)
        why = "idle";
      if (why.empty()) {
        ++it;
        continue;
      }
      due.emplace_back(it->second, why);
      it = sessions_.erase(it);
    }
  }
  for (auto& [s, why] : due) {
    // A TTL that expires mid-exec ends the session once that exec is over.
    std::lock_guard op(s->op);
    if (!s->ended) finish(*s, why);
  }
}

void SessionManager::endAll(const std::string& why) {
  std::map<std::string, std::shared_ptr<Session>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(sessions_);
  }
  for (auto& [id, s] : all) {
    std::lock_guard op(s->op);
    if (!s->ended) finish(*s, why);
  }
}

}  // namespace sluice::serve
