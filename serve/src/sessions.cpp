// Sessions (sessions.hpp).
#include "sessions.hpp"

#include <unistd.h>

#include "pool.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/json.hpp"
#include "sluice/execution/wiring.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/policy/widening.hpp"
#include "sluice/runner/environment.hpp"
#include "sluice/runner/receipt.hpp"
#include "sluice/runner/session.hpp"

namespace sluice::serve {
namespace rn = sluice::runner;
namespace pol = sluice::policy;
using nlohmann::json;

namespace {

base::Error bad(const std::string& what) {
  return apiFail(base::Code::kInvalidArgument, "bad_request", what);
}

base::Result<std::chrono::milliseconds> duration(const json& body, const char* key,
                                                 std::chrono::milliseconds dflt) {
  if (!body.contains(key)) return dflt;
  if (!body[key].is_string()) return std::unexpected(bad(std::string(key) + ": must be a string"));
  auto d = pol::parseDuration(body[key].get<std::string>());
  if (!d) return std::unexpected(bad(std::string(key) + ": " + d.error()));
  if (d->count() <= 0) return std::unexpected(bad(std::string(key) + ": must be positive"));
  return *d;
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
base::Result<std::string> sandboxPath(const std::string& url_path) {
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
base::Error fileError(const std::string& message) {
  if (message.find("No such file") != std::string::npos ||
      message.find("not found") != std::string::npos)
    return apiFail(base::Code::kNotFound, "not_found", message);
  if (message.find("No space") != std::string::npos ||
      message.find("too large") != std::string::npos ||
      message.find("File too large") != std::string::npos)
    return apiFail(base::Code::kTooLarge, "payload_too_large", message);
  return apiFail(base::Code::kInvalidArgument, "bad_request", message);
}

}  // namespace

struct SessionManager::Session {
  std::string id;
  std::string caller;
  std::shared_ptr<const pol::Workflow> workflow;
  std::chrono::system_clock::time_point created_at, expires_at;
  std::chrono::milliseconds idle_timeout{};
  std::chrono::steady_clock::time_point last_used;
  std::chrono::steady_clock::time_point deadline;  // TTL
  std::unique_ptr<sluice::execution::Sandbox> sandbox;
  rn::SandboxSession* box = nullptr;  // the sandbox's, for file operations
  std::vector<std::string> execs;
  bool pooled = false;  // its sandbox came from the warm pool (replenished after its first exec)
  std::mutex op;        // one exec or file operation at a time
  bool ended = false;   // guarded by op
  int busy = 0;         // guarded by the manager's mu_: operations in flight (not idle)
  std::shared_ptr<void> hold;  // its unit of the manager's Quota, given back by finish()
  // The policy in force (live updates replace it; `workflow` stays the one it started with).
  std::mutex policy_mu;
  std::shared_ptr<const pol::Workflow> policy;
};

SessionManager::SessionManager(Engine& engine, std::size_t max_sessions, std::size_t per_caller,
                               std::chrono::milliseconds max_ttl)
    : engine_(engine),
      quota_(max_sessions, per_caller == 0 ? max_sessions : per_caller, "sessions open",
             "--max-sessions", "too_many_sessions"),
      max_ttl_(max_ttl) {}

SessionManager::~SessionManager() { endAll("shutdown"); }

std::size_t SessionManager::active() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

base::Result<SessionRequest> parseSessionRequest(const json& body) {
  if (!body.is_object()) return std::unexpected(bad("body: must be a JSON object"));
  for (const auto& [key, v] : body.items())
    if (key != "workflow" && key != "idle_timeout" && key != "ttl" && key != "learn" &&
        key != "shadow_policy")
      return std::unexpected(bad(key + ": unknown field"));
  if (!body.contains("workflow") || !body["workflow"].is_string())
    return std::unexpected(bad("workflow: is required (a string)"));
  SessionRequest r;
  r.workflow = body["workflow"];
  if (body.contains("learn")) {
    if (!body["learn"].is_boolean()) return std::unexpected(bad("learn: must be a boolean"));
    r.learn = body["learn"].get<bool>();
  }
  if (body.contains("shadow_policy")) {
    if (!body["shadow_policy"].is_string())
      return std::unexpected(bad("shadow_policy: must be a string (workflow YAML)"));
    r.shadow_policy = body["shadow_policy"].get<std::string>();
  }
  for (auto [key, dst] : {std::pair{"idle_timeout", &r.idle_timeout}, std::pair{"ttl", &r.ttl}}) {
    if (!body.contains(key)) continue;
    auto d = duration(body, key, {});
    if (!d) return std::unexpected(d.error());
    *dst = *d;
  }
  return r;
}

namespace {

/// A session's own shadow policy (SessionRequest::shadow_policy), compiled; null when it has
/// none. Validated like a live update's policy: diagnostics name shadow_policy.yaml:L:C.
base::Result<std::shared_ptr<const pol::Matcher>> sessionShadow(const SessionRequest& request) {
  if (request.shadow_policy.empty()) return nullptr;
  auto parsed = pol::parseWorkflow(request.shadow_policy, "shadow_policy.yaml");
  if (!parsed)
    return std::unexpected(bad("shadow_policy: the policy is not valid:\n" + parsed.error().str()));
  if (parsed->name != request.workflow)
    return std::unexpected(bad("shadow_policy: the policy is workflow '" + parsed->name +
                               "', the session's is '" + request.workflow + "'"));
  return pol::Matcher::compile(std::make_shared<const pol::Workflow>(std::move(*parsed)));
}

}  // namespace

base::Result<json> SessionManager::create(const Caller& caller, const SessionRequest& request) {
  const std::string& name = request.workflow;
  auto w = engine_.workflow(name);
  if (!w)
    return std::unexpected(
        apiFail(base::Code::kNotFound, "not_found", "workflow '" + name + "' is not served"));
  auto shadow = sessionShadow(request);
  if (!shadow) return std::unexpected(shadow.error());
  // Defaults within the ceiling; an explicit value above it is refused, not cut, so the
  // caller is not surprised by a session that ends early.
  const auto idle = request.idle_timeout.value_or(
      std::min<std::chrono::milliseconds>(std::chrono::minutes(5), max_ttl_));
  const auto ttl =
      request.ttl.value_or(std::min<std::chrono::milliseconds>(std::chrono::hours(1), max_ttl_));
  for (const auto& [key, d] : {std::pair{"idle_timeout", idle}, std::pair{"ttl", ttl}})
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
  s->idle_timeout = idle;
  s->created_at = std::chrono::system_clock::now();
  s->expires_at =
      s->created_at + std::chrono::duration_cast<std::chrono::system_clock::duration>(ttl);
  s->last_used = std::chrono::steady_clock::now();
  s->deadline = s->last_used + ttl;
  if (auto started = startSandbox(*s, request.learn, *shadow); !started)
    return std::unexpected(started.error());
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
base::Result<void> SessionManager::startSandbox(Session& s, bool learn,
                                                std::shared_ptr<const pol::Matcher> shadow) {
  auto open = engine_.openOptions(s.workflow, sluice::execution::SandboxKind::kSession,
                                  Engine::newId("se-"), learn);
  if (!open) return std::unexpected(open.error());
  const bool own_shadow = shadow != nullptr;
  if (own_shadow) open->shadow = std::move(shadow);
  // A prepared sandbox enforces, with the daemon's shadow: not for learn or an own shadow.
  if (Pool* pool = engine_.pool(); pool && !learn && !own_shadow)
    if (auto p = pool->take(*s.workflow)) {
      s.pooled = true;
      s.sandbox = std::move(p);
    }
  if (!s.sandbox) {
    auto opened = sluice::execution::Sandbox::open(engine_.services(), std::move(*open));
    if (!opened) {
      const auto& e = opened.error();
      return std::unexpected(
          apiFail(base::Code::kInternal, "internal",
                  "session setup failed at step '" + e.where + "': " + e.message));
    }
    s.sandbox = std::move(*opened);
  }
  s.id = s.sandbox->id();
  s.box = s.sandbox->session();
  s.policy = s.workflow;
  return {};
}

base::Result<std::shared_ptr<SessionManager::Session>> SessionManager::find(const Caller& caller,
                                                                            const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  // Another caller's session does not exist, for this caller.
  if (it == sessions_.end() || it->second->caller != caller.name)
    return std::unexpected(apiFail(base::Code::kNotFound, "not_found", "no session " + id));
  return it->second;
}

base::Result<json> SessionManager::exec(const Caller& caller, const std::string& id,
                                        const sluice::execution::Command& cmd,
                                        const std::function<void(std::string)>& lines,
                                        int stop_fd) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  Session& s = **found;
  std::lock_guard op(s.op);
  if (s.ended)
    return std::unexpected(apiFail(base::Code::kNotFound, "not_found", "no session " + id));
  {
    std::lock_guard lock(mu_);
    ++s.busy;
  }
  const std::string exec_id = s.sandbox->nextExecutionId();
  auto receipt =
      engine_.execute(*s.sandbox, Caller{s.caller, false}, cmd, lines, stop_fd, std::nullopt);
  // A refused command ran nothing: it is not one of the session's execs.
  if (receipt || base::httpStatus(receipt.error().code) != 400) s.execs.push_back(exec_id);
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
base::Result<T> SessionManager::onFile(const Caller& caller, const std::string& id,
                                       const std::string& path, Fn fn) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  auto p = sandboxPath(path);
  if (!p) return std::unexpected(p.error());
  Session& s = **found;
  std::lock_guard op(s.op);
  if (s.ended)
    return std::unexpected(apiFail(base::Code::kNotFound, "not_found", "no session " + id));
  {
    std::lock_guard lock(mu_);
    s.last_used = std::chrono::steady_clock::now();
  }
  return fn(s, *p);
}

base::Result<json> SessionManager::putFile(const Caller& caller, const std::string& id,
                                           const std::string& path, const std::string& data) {
  return onFile<json>(
      caller, id, path, [&](Session& s, const std::string& p) -> base::Result<json> {
        auto info = s.box->writeFile(p, data);
        if (!info) return std::unexpected(fileError(info.error()));
        return json{{"path", info->path}, {"bytes", info->bytes}, {"sha256", info->sha256}};
      });
}

base::Result<json> SessionManager::putFileFrom(const Caller& caller, const std::string& id,
                                               const std::string& path, int fd) {
  return onFile<json>(
      caller, id, path, [&](Session& s, const std::string& p) -> base::Result<json> {
        if (::lseek(fd, 0, SEEK_SET) != 0)
          return std::unexpected(
              apiFail(base::Code::kInternal, "internal", "the spooled upload is gone"));
        auto info = s.box->writeFileFrom(p, fd);
        if (!info) return std::unexpected(fileError(info.error()));
        return json{{"path", info->path}, {"bytes", info->bytes}, {"sha256", info->sha256}};
      });
}

base::Result<std::uint64_t> SessionManager::uploadLimit(const Caller& caller,
                                                        const std::string& id) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  return (*found)->sandbox->limits().disk;
}

base::Result<SessionManager::FileBody> SessionManager::getFile(const Caller& caller,
                                                               const std::string& id,
                                                               const std::string& path) {
  return onFile<FileBody>(caller, id, path,
                          [&](Session& s, const std::string& p) { return readOrList(s, p); });
}

base::Result<SessionManager::FileBody> SessionManager::readOrList(Session& s,
                                                                  const std::string& path) {
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
  s.sandbox->close();
  json network = rn::networkJson(execution::networkSummary(s.sandbox->networkStats()),
                                 std::string(policy::networkModeName(s.workflow->sandbox.network)));
  json summary = {{"session_id", s.id},
                  {"workflow", s.workflow->name},
                  {"caller", s.caller},
                  {"execs", s.execs},
                  {"artifacts", artifacts},
                  {"network", network},
                  {"ended_by", ended_by},
                  {"created_at", rn::formatTimestamp(s.created_at)},
                  {"ended_at", rn::formatTimestamp(std::chrono::system_clock::now())}};
  // The session's own row in the chain: its summary is the receipt.
  audit::ExecutionRecord rec;
  rec.id = s.id;
  rec.workflow = s.workflow->name;
  rec.policy_sha256 = s.workflow->sha256;
  rec.argv_json = "[]";
  rec.started_at_ms = base::epochMs(s.created_at);
  rec.ended_at_ms = base::nowMs();
  rec.artifacts_json = base::dumpJson(artifacts);
  rec.receipt_json = base::dumpJson(summary);
  if (auto hash = engine_.store().recordExecution(rec)) summary["hash"] = *hash;
  s.ended = true;
  s.hold.reset();
  engine_.metrics().sessionClosed();
  return summary;
}

base::Result<json> SessionManager::setPolicy(const Caller& caller, const std::string& id,
                                             const std::string& yaml) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  Session& s = **found;
  auto parsed = pol::parseWorkflow(yaml, "policy.yaml");
  if (!parsed) return std::unexpected(bad("the policy is not valid:\n" + parsed.error().str()));
  auto next = std::make_shared<const pol::Workflow>(std::move(*parsed));
  // One update at a time: each is checked against the policy it replaces.
  std::lock_guard lock(s.policy_mu);
  if (next->name != s.policy->name)
    return std::unexpected(bad("the policy is workflow '" + next->name + "', the session's is '" +
                               s.policy->name + "'"));
  if (!caller.approver) {
    const auto widening = pol::widens(*s.policy, *next);
    if (!widening.empty()) {
      std::string why = "only an approver may widen a session's policy:";
      for (const auto& w : widening) why += "\n" + w;
      return std::unexpected(apiFail(base::Code::kPermissionDenied, "widening_not_allowed", why));
    }
  }
  auto generation = s.sandbox->replacePolicy(pol::Matcher::compile(next));
  if (!generation)
    return std::unexpected(apiFail(base::Code::kConflict, "conflict",
                                   "session " + id + " has no proxied network to update"));
  s.policy = next;
  return json{{"id", s.id},
              {"workflow", next->name},
              {"policy_sha256", next->sha256},
              {"generation", *generation}};
}

base::Result<json> SessionManager::end(const Caller& caller, const std::string& id) {
  auto found = find(caller, id);
  if (!found) return std::unexpected(found.error());
  Session& s = **found;
  std::lock_guard op(s.op);
  if (s.ended)
    return std::unexpected(apiFail(base::Code::kNotFound, "not_found", "no session " + id));
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
