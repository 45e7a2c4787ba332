// Routes and handlers (api.hpp).
#include "api.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>
#include <thread>

#include "sluice/base/json.hpp"
#include "sluice/base/log.hpp"
#include "sluice/base/strict_json.hpp"
#include "sluice/runner/receipt.hpp"
#include "timing.hpp"

namespace sluice::serve {
using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kNdjson = "application/x-ndjson";

http::status toStatus(int code) { return static_cast<http::status>(code); }

std::expected<json, ApiError> parseBody(const Request& req) {
  if (!req.content_type.empty() && req.content_type.find("json") == std::string::npos)
    return std::unexpected(
        ApiError{415, "unsupported_media_type",
                 "expected Content-Type: application/json, not " + req.content_type, ""});
  // Strict: a key named twice is refused, never resolved to its first or last value.
  auto parsed = base::parseStrictJson(req.body);
  if (!parsed)
    return std::unexpected(ApiError{400, "invalid_json",
                                    parsed.error().duplicate_key
                                        ? "the request body names a key twice"
                                        : "the request body is not valid JSON",
                                    parsed.error().describe()});
  return std::move(*parsed);
}

// The body of PUT /v1/sessions/{id}/policy: the workflow YAML itself (text/yaml,
// application/yaml), or JSON {"policy": "<yaml>"}.
std::expected<std::string, ApiError> policyText(const Request& req) {
  if (req.content_type.find("yaml") != std::string::npos) return req.body;
  auto body = parseBody(req);
  if (!body) return std::unexpected(body.error());
  if (!body->is_object() || body->size() != 1 || !body->contains("policy") ||
      !(*body)["policy"].is_string())
    return std::unexpected(ApiError{
        400, "bad_request", "policy: the body must be {\"policy\": \"<workflow YAML>\"}", ""});
  return (*body)["policy"].get<std::string>();
}

}  // namespace

std::string healthBody() { return base::dumpJson(json{{"status", "ok"}, {"version", "0.1.0"}}); }

// Built outside co_await expressions: g++ 12 miscompiles braced aggregates with string literals
// inside them ("array used as initializer").
ApiError apiError(int status, const char* reason, std::string message) {
  return ApiError{status, reason, std::move(message), ""};
}

std::string errorBody(int status, const std::string& reason, const std::string& message,
                      const std::string& detail) {
  (void)status;
  json j = {{"error", message}, {"reason", reason}};
  if (!detail.empty()) j["detail"] = detail;
  return base::dumpJson(j);
}

// One execution in flight: its worker thread fills `lines` and `done`, and wakes the handler by
// cancelling `wake` on the connection's strand. `stop` (an eventfd) stops the run.
struct Api::RunSlot {
  explicit RunSlot(net::any_io_executor ex) : wake(ex) {
    wake.expires_at(net::steady_timer::time_point::max());
  }
  ~RunSlot() {
    if (stop >= 0) ::close(stop);
  }
  void push(std::string line) {
    {
      std::lock_guard lock(mu);
      lines.push_back(std::move(line));
    }
    poke();
  }
  void finish(const json&) {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    poke();
  }
  void poke() {
    net::post(wake.get_executor(), [w = std::weak_ptr<RunSlot>(self)] {
      if (auto s = w.lock()) s->wake.cancel();
    });
  }
  // On the worker thread: runs `work` (its lines pushed here with `stream`) and, with `direct`,
  // writes a whole answer there; then wakes the handler.
  void runWork(const Work& work, bool stream, base::Result<Answer>& answer, StepTrace* trace,
               DirectAnswer* direct) {
    auto lines =
        stream
            ? std::function<void(std::string)>([this](std::string line) { push(std::move(line)); })
            : std::function<void(std::string)>();
    StepTrace::setCurrent(trace);
    if (trace) trace->mark("handed to a worker thread");
    answer = work(lines, stop);
    if (trace) trace->mark("answer's JSON");
    if (direct && answer) {
      direct->write(static_cast<http::status>(answer->status), answer->content_type,
                    std::move(answer->body));
      if (trace) trace->mark("answer written");
    }
    StepTrace::setCurrent(nullptr);
    finish(json());
  }
  void requestStop() {
    std::uint64_t one = 1;
    if (stop >= 0) (void)!::write(stop, &one, sizeof one);
  }

  std::weak_ptr<RunSlot> self;
  net::steady_timer wake;
  int stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::mutex mu;
  std::deque<std::string> lines;
  bool done = false;
};

namespace {

// The edge's rendering of an error; a server error is logged with what its body leaves out:
// the errno and the underlying library's code (SQLite's, for an audit commit that failed).
ApiError rendered(const base::Error& e) {
  ApiError a = apiError(e);
  if (a.status >= 500)
    base::logger(base::LoggerId::kServe)
        .error("answered {} {}: {} (errno {}, cause code {})", a.status, a.reason, e.text(),
               e.sys_errno, e.cause_code);
  return a;
}

}  // namespace

net::awaitable<void> Api::error(Reply& reply, const base::Error& e) {
  co_await error(reply, rendered(e));
}

net::awaitable<void> Api::error(Reply& reply, const ApiError& e) {
  if (e.status == 429) metrics_.refused(e.reason);
  reply.retryAfter(e.retry_after);
  co_await reply.send(toStatus(e.status), kJson,
                      errorBody(e.status, e.reason, e.message, e.detail));
}

net::awaitable<void> Api::handle(Request& req, Reply& reply) {
  std::string path = req.target.substr(0, req.target.find('?'));
  const auto m = req.method;
  if (path == "/v1/healthz" && m == http::verb::get) {
    if (draining_) {
      co_await error(reply, apiError(503, "draining", "the daemon is shutting down"));
      co_return;
    }
    const std::string health = healthBody();
    co_await reply.send(http::status::ok, kJson, health);
    co_return;
  }
  if (path == "/v1/workflows" && m == http::verb::get) {
    json arr = json::array();
    for (const auto& w : engine_.workflows())
      arr.push_back(
          {{"name", w.name}, {"description", w.description}, {"policy_sha256", w.policy_sha256}});
    co_await reply.send(http::status::ok, kJson, base::dumpJson(arr));
    co_return;
  }
  if (path == "/metrics" && m == http::verb::get) {
    // Root and approvers (Caller::approver), and tokens marked `metrics`: the counters say who
    // is refused and how busy the daemon is, which is not every caller's business.
    if (!req.caller.approver && !req.caller.metrics) {
      co_await error(reply, apiError(403, "forbidden", req.caller.name + " may not read /metrics"));
      co_return;
    }
    co_await reply.send(http::status::ok, "text/plain; version=0.0.4",
                        metrics_.render(engine_.auditQueueDepth(), engine_.otlpCounters()));
    co_return;
  }
  if (path == "/v1/runs" && m == http::verb::post) {
    co_await postRun(req, reply);
    co_return;
  }
  if (path == "/v1/approvals" || path.starts_with("/v1/approvals/")) {
    co_await approvals(req, reply, path);
    co_return;
  }
  constexpr std::string_view kSessions = "/v1/sessions";
  if (path == kSessions || path.starts_with("/v1/sessions/")) {
    co_await sessionRoute(req, reply, path.substr(kSessions.size()));
    co_return;
  }
  constexpr std::string_view kExecutions = "/v1/executions/";
  if (path.starts_with(kExecutions) && m == http::verb::get) {
    co_await getExecution(req, reply, path.substr(kExecutions.size()));
    co_return;
  }
  const bool known = path == "/v1/healthz" || path == "/v1/workflows" || path == "/metrics" ||
                     path == "/v1/runs" || path.starts_with(kExecutions);
  if (known) {
    co_await error(reply,
                   apiError(405, "bad_request", req.method_text + " is not allowed on " + path));
    co_return;
  }
  co_await error(reply,
                 apiError(404, "not_found", "no such endpoint: " + req.method_text + " " + path));
}

// On a worker thread: the receipt is read from the audit store (opening it, a query), and the
// connections' one I/O thread does not wait for the disk.
net::awaitable<void> Api::getExecution(Request& req, Reply& reply, const std::string& id) {
  Work work = [this, caller = req.caller, id](const std::function<void(std::string)>&,
                                              int) -> base::Result<Answer> {
    auto receipt = engine_.execution(caller, id);
    if (!receipt)
      return std::unexpected(apiFail(base::Code::kNotFound, "not_found", "no execution " + id));
    return Answer{200, kJson, base::dumpJson(*receipt)};
  };
  co_await offload(reply, std::move(work), false);
}

net::awaitable<void> Api::offload(Reply& reply, Work work, bool stream) {
  auto slot = std::make_shared<RunSlot>(reply.executor());
  slot->self = slot;
  {
    std::lock_guard lock(mu_);
    running_.insert(slot);
  }
  // Leaves the set once the answer is written (or the client is gone): drain waits for that.
  struct Done {
    Api* api;
    std::shared_ptr<RunSlot> slot;
    ~Done() {
      std::lock_guard lock(api->mu_);
      api->running_.erase(slot);
      api->idle_.notify_all();
    }
  } done_guard{this, slot};
  auto answer = std::make_shared<base::Result<Answer>>();
  // SLUICE_TIMING=1: the call's steps, logged once the answer is out.
  std::shared_ptr<StepTrace> trace;
  if (StepTrace::enabled()) {
    trace = std::make_shared<StepTrace>();
    trace->mark("request read");
  }
  // A whole answer is written by the worker itself (one hand-off fewer), while this coroutine
  // waits for it and so neither reads nor writes the connection; a stream's lines, and errors,
  // are written here.
  std::shared_ptr<DirectAnswer> direct;
  if (!stream) direct = reply.direct();
  // A worker thread: the runner blocks (and a sandbox is tied to the thread that made it until
  // its job is done).
  workers_.run([slot, answer, work = std::move(work), stream, trace, direct] {
    slot->runWork(work, stream, *answer, trace.get(), direct.get());
  });

  // A client that goes away while nothing is written (a quiet program) ends its run too.
  reply.watchClose([slot] {
    slot->requestStop();
    slot->poke();
  });
  struct Unwatch {
    Reply& r;
    ~Unwatch() { r.stopWatching(); }
  } unwatch{reply};
  bool streaming = false;
  const bool client_here = co_await pumpLines(reply, *slot, streaming);
  // The work is done (its thread no longer touches `answer`): what waited for the answer is
  // released when this returns, whichever way, and before drain can see the slot gone.
  struct ReleaseAfter {
    base::Result<Answer>& a;
    ~ReleaseAfter() {
      if (a) a->after.reset();
    }
  } release_after{*answer};
  if (trace) trace->mark("back on the connection's thread");
  if (client_here && direct && direct->written()) {
    if (!direct->rest().empty() && co_await reply.sendRest(*direct) && trace)
      trace->mark("the rest of the answer written");
  } else if (client_here) {
    co_await sendAnswer(reply, *answer, stream, streaming);
    if (trace) trace->mark("answer written");
  }
  if (trace) {
    base::logger(base::LoggerId::kServe).info("timing: {}", trace->render());
  }
}

net::awaitable<bool> Api::pumpLines(Reply& reply, RunSlot& slot, bool& streaming) {
  bool client_gone = false;
  for (;;) {
    std::deque<std::string> lines;
    bool done = false;
    {
      std::lock_guard lock(slot.mu);
      lines.swap(slot.lines);
      done = slot.done;
    }
    for (auto& line : lines) {
      if (client_gone) break;
      if (!streaming) {
        streaming = true;
        if (!co_await reply.beginStream(http::status::ok, kNdjson)) client_gone = true;
      }
      if (!client_gone && !co_await reply.chunk(line + "\n")) client_gone = true;
      // A client that went away ends its execution (the receipt is still stored).
      if (client_gone) slot.requestStop();
    }
    if (done) co_return !client_gone;
    // A wake is a cancel of a pending wait: one that came while a chunk was being written had
    // no wait to cancel, so what it announced is looked for again before waiting. The check
    // and the wait run on the connection's strand, where the wake's cancel runs too.
    {
      std::lock_guard lock(slot.mu);
      if (!slot.lines.empty() || slot.done) continue;
    }
    ErrorCode ec;
    co_await slot.wake.async_wait(net::redirect_error(net::use_awaitable, ec));
    slot.wake.expires_at(net::steady_timer::time_point::max());
  }
}

net::awaitable<void> Api::sendAnswer(Reply& reply, base::Result<Answer>& answer, bool stream,
                                     bool streaming) {
  if (!answer) {
    const ApiError e = rendered(answer.error());
    if (streaming) {
      json j = {{"type", "error"}, {"error", e.message}, {"reason", e.reason}};
      if (co_await reply.chunk(base::dumpJson(j) + "\n")) co_await reply.endStream();
    } else {
      co_await error(reply, e);
    }
    co_return;
  }
  if (stream) {
    if (!streaming && !co_await reply.beginStream(http::status::ok, kNdjson)) co_return;
    json receipt = json::parse(answer->body, nullptr, false);
    json last = {{"type", "receipt"}, {"receipt", receipt}};
    if (co_await reply.chunk(base::dumpJson(last) + "\n")) co_await reply.endStream();
    co_return;
  }
  co_await reply.send(toStatus(answer->status), answer->content_type, std::move(answer->body));
}

net::awaitable<void> Api::postRun(Request& req, Reply& reply) {
  if (draining_) {
    co_await error(reply, apiError(503, "draining", "the daemon is shutting down"));
    co_return;
  }
  auto body = parseBody(req);
  if (!body) {
    co_await error(reply, body.error());
    co_return;
  }
  auto request = parseRunRequest(*body);
  if (!request) {
    co_await error(reply, request.error());
    co_return;
  }
  const bool stream = req.accept.find(kNdjson) != std::string::npos;
  Work work = [this, caller = req.caller, request = std::move(*request)](
                  const std::function<void(std::string)>& lines,
                  int stop_fd) -> base::Result<Answer> {
    std::shared_ptr<void> after;
    auto r = engine_.run(caller, request, lines, stop_fd, &after);
    if (!r) return std::unexpected(r.error());
    return Answer{200, kJson, base::dumpJson(*r), std::move(after)};
  };
  co_await offload(reply, std::move(work), stream);
}

// /v1/sessions and /v1/sessions/{id}[/exec | /files/{path}]; `rest` follows "/v1/sessions".
net::awaitable<void> Api::sessionRoute(Request& req, Reply& reply, const std::string& rest) {
  // Every Work is a named local before co_await: g++ 12 destroys lambda temporaries inside a
  // co_await expression twice.
  const auto m = req.method;
  Work work;
  bool stream = false;
  std::optional<ApiError> refused;
  std::string tail = rest.empty() ? std::string() : rest.substr(1);
  std::string id = tail.substr(0, tail.find('/'));
  std::string sub = tail.size() > id.size() ? tail.substr(id.size()) : "";
  constexpr std::string_view kFiles = "/files/";
  const bool creates = tail.empty() && m == http::verb::post;
  const bool execs = !id.empty() && sub == "/exec" && m == http::verb::post;
  if ((creates || execs) && draining_) {
    refused = apiError(503, "draining", "the daemon is shutting down");
  } else if (creates || execs) {
    auto body = parseBody(req);
    if (!body) {
      refused = body.error();
    } else if (creates) {
      work = makeSessionCreate(req.caller, std::move(*body));
    } else {
      stream = req.accept.find(kNdjson) != std::string::npos;
      work = makeSessionExec(req.caller, id, std::move(*body));
    }
  } else if (!id.empty() && sub.empty() && m == http::verb::delete_) {
    work = makeSessionEnd(req.caller, id);
  } else if (!id.empty() && sub == "/policy" && m == http::verb::put) {
    auto yaml = policyText(req);
    if (yaml)
      work = makePolicyPut(req.caller, id, std::move(*yaml));
    else
      refused = yaml.error();
  } else if (!id.empty() && sub.starts_with(kFiles) && m == http::verb::put) {
    work = makeFilePut(req.caller, id, sub.substr(kFiles.size()), req.spooled);
  } else if (!id.empty() && sub.starts_with(kFiles) && m == http::verb::get) {
    work = makeFileGet(req.caller, id, sub.substr(kFiles.size()));
  } else {
    refused = apiError(404, "not_found", "no such endpoint: " + req.method_text + " " + req.target);
  }
  if (refused) {
    co_await error(reply, *refused);
    co_return;
  }
  co_await offload(reply, std::move(work), stream);
}

Api::Work Api::makeSessionCreate(Caller caller, json body) {
  return [this, caller = std::move(caller), body = std::move(body)](
             const std::function<void(std::string)>&, int) -> base::Result<Answer> {
    auto request = parseSessionRequest(body);
    if (!request) return std::unexpected(request.error());
    auto r = sessions_.create(caller, *request);
    if (!r) return std::unexpected(r.error());
    return Answer{201, kJson, base::dumpJson(*r)};
  };
}

Api::Work Api::makeSessionExec(Caller caller, std::string id, json body) {
  return [this, caller = std::move(caller), id = std::move(id), body = std::move(body)](
             const std::function<void(std::string)>& lines, int stop_fd) -> base::Result<Answer> {
    auto cmd = parseExecRequest(body);
    if (!cmd) return std::unexpected(cmd.error());
    auto r = sessions_.exec(caller, id, *cmd, lines, stop_fd);
    if (!r) return std::unexpected(r.error());
    return Answer{200, kJson, base::dumpJson(*r)};
  };
}

Api::Work Api::makeSessionEnd(Caller caller, std::string id) {
  return [this, caller = std::move(caller), id = std::move(id)](
             const std::function<void(std::string)>&, int) -> base::Result<Answer> {
    auto r = sessions_.end(caller, id);
    if (!r) return std::unexpected(r.error());
    return Answer{200, kJson, base::dumpJson(*r)};
  };
}

Api::Work Api::makePolicyPut(Caller caller, std::string id, std::string yaml) {
  return [this, caller = std::move(caller), id = std::move(id), yaml = std::move(yaml)](
             const std::function<void(std::string)>&, int) -> base::Result<Answer> {
    auto r = sessions_.setPolicy(caller, id, yaml);
    if (!r) return std::unexpected(r.error());
    return Answer{200, kJson, base::dumpJson(*r)};
  };
}

// The upload was spooled to disk as it arrived (Admission::plan); it is copied from there.
Api::Work Api::makeFilePut(Caller caller, std::string id, std::string path,
                           std::shared_ptr<SpooledBody> data) {
  return [this, caller = std::move(caller), id = std::move(id), path = std::move(path),
          data = std::move(data)](const std::function<void(std::string)>&,
                                  int) -> base::Result<Answer> {
    auto r = data ? sessions_.putFileFrom(caller, id, path, data->fd)
                  : sessions_.putFile(caller, id, path, "");
    if (!r) return std::unexpected(r.error());
    return Answer{201, kJson, base::dumpJson(*r)};
  };
}

Api::Work Api::makeFileGet(Caller caller, std::string id, std::string path) {
  return [this, caller = std::move(caller), id = std::move(id), path = std::move(path)](
             const std::function<void(std::string)>&, int) -> base::Result<Answer> {
    auto f = sessions_.getFile(caller, id, path);
    if (!f) return std::unexpected(f.error());
    return Answer{200, f->content_type, std::move(f->body)};
  };
}

// Approvals (docs/approvals.md): approvers see every pending one and answer it; an approval
// already decided, timed out or whose execution ended is 409.
net::awaitable<void> Api::approvals(Request& req, Reply& reply, const std::string& path) {
  std::optional<ApiError> refused;
  std::string answer;
  auto& desk = engine_.approvals();
  if (!req.caller.approver) {
    refused = apiError(403, "forbidden", req.caller.name + " may not see or answer approvals");
  } else if (path == "/v1/approvals" && req.method == http::verb::get) {
    json list = json::array();
    for (const auto& a : desk.pending()) list.push_back(json::parse(proxy::approvalJson(a)));
    answer = base::dumpJson(list);
  } else if (path.size() > 14 && req.method == http::verb::post) {
    const std::string id = path.substr(14);
    auto body = parseBody(req);
    if (!body) {
      refused = body.error();
    } else if (!body->is_object() || !body->contains("decision") ||
               ((*body)["decision"] != "allow" && (*body)["decision"] != "deny")) {
      refused = apiError(400, "bad_request", "decision: must be \"allow\" or \"deny\"");
    } else if (body->contains("scope") &&
               (!(*body)["scope"].is_string() ||
                !proxy::parseScope((*body)["scope"].get<std::string>()))) {
      refused = apiError(400, "bad_request", "scope: must be \"once\", \"execution\" or \"host\"");
    } else if (auto unknown = std::find_if(
                   body->items().begin(), body->items().end(),
                   [](const auto& kv) { return kv.key() != "decision" && kv.key() != "scope"; });
               unknown != body->items().end()) {
      refused = apiError(400, "bad_request", unknown.key() + ": unknown field");
    } else {
      const bool allow = (*body)["decision"] == "allow";
      const proxy::Scope scope = body->contains("scope")
                                     ? *proxy::parseScope((*body)["scope"].get<std::string>())
                                     : proxy::Scope::kOnce;
      auto held = desk.find(id);
      auto status = desk.answer(id, allow, scope, req.caller.name);
      if (status == proxy::AnswerStatus::kNotFound) {
        refused = apiError(404, "not_found", "no pending approval " + id);
      } else if (status == proxy::AnswerStatus::kGone || !held) {
        refused =
            apiError(409, "conflict",
                     "approval " + id +
                         " is no longer pending (decided, timed out, or its execution ended)");
      } else {
        json j = json::parse(proxy::approvalJson(*held));
        j["decision"] = allow ? "allow" : "deny";
        j["scope"] = proxy::scopeName(scope);
        j["decided_by"] = req.caller.name;
        j["decided_at"] = runner::formatTimestamp(std::chrono::system_clock::now());
        answer = base::dumpJson(j);
      }
    }
  } else {
    refused = apiError(404, "not_found", "no such endpoint: " + req.method_text + " " + path);
  }
  if (refused) {
    co_await error(reply, *refused);
    co_return;
  }
  co_await reply.send(http::status::ok, kJson, std::move(answer));
}

void Api::waitForExecutions(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!idle_.wait_for(lock, timeout, [this] { return running_.empty(); })) {
    for (const auto& s : running_) s->requestStop();
    idle_.wait_for(lock, std::chrono::seconds(30), [this] { return running_.empty(); });
  }
}

}  // namespace sluice::serve
