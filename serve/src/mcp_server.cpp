// `sluice mcp` (sluice/serve/mcp.hpp): the JSON-RPC 2.0 connection over stdio.
//
// Three threads: the reader (serve()'s caller) parses each line and answers the protocol at
// once (initialize, ping, tools/list, errors), so the server stays responsive while a command
// runs; a worker runs tool calls one at a time, in the order they came; a writer is the only
// one that writes to the output, so a response is never interleaved with another and a
// watcher on a proxy thread (approvals) can hand it a message without blocking.
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "engine.hpp"
#include "mcp_elicit.hpp"
#include "mcp_lines.hpp"
#include "mcp_tools.hpp"
#include "metrics.hpp"
#include "sessions.hpp"
#include "sluice/base/json.hpp"
#include "sluice/base/loop.hpp"
#include "sluice/base/strict_json.hpp"
#include "sluice/execution/approve_with.hpp"
#include "sluice/execution/wiring.hpp"
#include "sluice/serve/mcp.hpp"

namespace sluice::serve {
using nlohmann::json;

namespace {

// JSON-RPC 2.0 error codes (https://www.jsonrpc.org/specification#error_object).
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

// No MCP message nests anywhere near this deep; deeper ones are refused before parsing.
constexpr std::size_t kMaxNesting = 64;

// Protocol revisions this server speaks, newest first; a client asking for another gets the
// one the design names.
constexpr const char* kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                             "2024-11-05"};
constexpr const char* kDefaultProtocolVersion = "2025-06-18";

json errorMessage(const json& id, int code, const std::string& message) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

json resultMessage(const json& id, json result) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

// A JSON-RPC id: a string or a whole number (MCP: never null).
bool validId(const json& id) { return id.is_string() || id.is_number_integer(); }

struct ToolJob {
  json id;
  std::string tool;
  json args;
  bool open_session = false;  // the session sandbox, opened at initialize
};

class McpServerImpl final : public McpServer {
 public:
  explicit McpServerImpl(McpOptions o) : options_(std::move(o)) {}
  ~McpServerImpl() override {
    for (int fd : {wake_[0], wake_[1]})
      if (fd >= 0) ::close(fd);
  }

  std::expected<void, std::string> init() {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return std::unexpected("pipe: failed");
    auto engine = Engine::create(options_.serve, metrics_);
    if (!engine) return std::unexpected(engine.error());
    engine_ = std::move(*engine);
    if (!engine_->workflow(options_.workflow)) {
      std::string names;
      for (const auto& w : engine_->workflows()) names += (names.empty() ? "" : ", ") + w.name;
      return std::unexpected("--workflow " + options_.workflow + ": no such workflow in " +
                             options_.serve.policy_dir + " (it has: " + names + ")");
    }
    sessions_ = std::make_unique<SessionManager>(*engine_, 1);
    const Caller caller{"uid:" + std::to_string(::getuid()), false};
    tools_ = std::make_unique<McpTools>(*engine_, *sessions_, options_.workflow, caller);
    elicit_ =
        std::make_unique<Elicitation>([this](json message) { send(std::move(message), false); });
    return {};
  }

  void serve(int in_fd, int out_fd) override {
    out_fd_ = out_fd;
    writer_.start();
    worker_ = std::thread([this] { workLoop(); });
    LineReader reader(in_fd, wake_[0], options_.max_line_bytes);
    for (;;) {
      auto item = reader.next();
      if (item.kind == LineReader::Kind::kEnd || item.kind == LineReader::Kind::kWoken) break;
      if (item.kind == LineReader::Kind::kTooLong) {
        send(errorMessage(nullptr, kInvalidRequest,
                          "message longer than " + std::to_string(options_.max_line_bytes) +
                              " bytes: skipped up to its newline"),
             true);
        continue;
      }
      handleLine(item.line);
    }
    // The calls already received finish (unless stopped), then the session ends.
    {
      std::lock_guard lock(work_mu_);
      work_done_ = true;
    }
    work_cv_.notify_all();
    worker_.join();
    unwatchApprovals();
    bool stopped = false;
    {
      std::lock_guard lock(work_mu_);
      stopped = stopping_;
    }
    tools_->close(stopped ? "shutdown" : "client");
    engine_->flush();
    writer_.stop();  // what is queued is written first
  }

  void stop() override {
    {
      std::lock_guard lock(work_mu_);
      stopping_ = true;
      jobs_.clear();
      if (running_stop_fd_ >= 0) (void)!::write(running_stop_fd_, "x", 1);
    }
    work_cv_.notify_all();
    (void)!::write(wake_[1], "x", 1);
  }

 private:
  // --- output --------------------------------------------------------------------------
  // Queues one message for the writer. `may_wait`: past max_pending_output, wait for the client
  // to read (the reader and worker may; a proxy thread's watcher may not).
  void send(const json& message, bool may_wait) {
    std::string line = base::dumpJson(message) + "\n";
    const std::size_t bytes = line.size();
    {
      std::unique_lock lock(out_mu_);
      if (may_wait)
        out_cv_.wait(lock, [&] { return out_bytes_ < options_.max_pending_output || out_broken_; });
      if (out_broken_) return;
      out_bytes_ += bytes;
    }
    if (!writer_.post([this, line = std::move(line)] { writeOne(line); })) {
      std::lock_guard lock(out_mu_);  // the writer has stopped: nobody reads any more
      out_bytes_ -= bytes;
    }
  }

  // On the writer loop, in order.
  void writeOne(const std::string& line) {
    bool broken = false;
    {
      std::lock_guard lock(out_mu_);
      broken = out_broken_;
    }
    // The client stopped reading for good: what is queued and all that follows is dropped.
    const bool ok = !broken && writeAll(line);
    std::lock_guard lock(out_mu_);
    out_bytes_ -= line.size();
    if (!ok) out_broken_ = true;
    out_cv_.notify_all();
  }

  bool writeAll(const std::string& s) {
    std::size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::write(out_fd_, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  // --- input ---------------------------------------------------------------------------
  void handleLine(const std::string& line) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;  // blank: nothing sent
    if (jsonNestingDepth(line, kMaxNesting) > kMaxNesting) {
      send(errorMessage(
               nullptr, kInvalidRequest,
               "invalid request: nested deeper than " + std::to_string(kMaxNesting) + " levels"),
           true);
      return;
    }
    // Strict: a key named twice ({"id":1,"id":2}, two "method"s) is a parse error, never
    // resolved to one of its values.
    auto parsed = base::parseStrictJson(line);
    if (!parsed) {
      send(errorMessage(nullptr, kParseError,
                        parsed.error().duplicate_key
                            ? "parse error: " + parsed.error().describe()
                            : std::string("parse error: the line is not JSON")),
           true);
      return;
    }
    json msg = std::move(*parsed);
    if (msg.is_array()) {
      // JSON-RPC batches are not part of MCP since 2025-06-18.
      send(errorMessage(nullptr, kInvalidRequest, "invalid request: batches are not supported"),
           true);
      return;
    }
    if (!msg.is_object()) {
      send(errorMessage(nullptr, kInvalidRequest, "invalid request: not a JSON object"), true);
      return;
    }
    const bool has_id = msg.contains("id");
    if (has_id && !validId(msg["id"])) {
      send(errorMessage(nullptr, kInvalidRequest,
                        "invalid request: id must be a string or an integer"),
           true);
      return;
    }
    const json id = has_id ? msg["id"] : json(nullptr);
    if (msg.value("jsonrpc", json()) != "2.0") {
      if (has_id || !msg.contains("method"))
        send(errorMessage(id, kInvalidRequest, "invalid request: jsonrpc must be \"2.0\""), true);
      return;
    }
    if (!msg.contains("method")) {
      if (has_id && (msg.contains("result") || msg.contains("error"))) {
        elicit_->onResponse(msg);  // an answer to one of our requests
        return;
      }
      send(errorMessage(id, kInvalidRequest, "invalid request: no method"), true);
      return;
    }
    if (!msg["method"].is_string()) {
      if (has_id)
        send(errorMessage(id, kInvalidRequest, "invalid request: method must be a string"), true);
      return;
    }
    const json params = msg.value("params", json::object());
    if (!params.is_object()) {
      if (has_id)
        send(errorMessage(id, kInvalidParams, "invalid params: params must be an object"), true);
      return;
    }
    const std::string method = msg["method"];
    if (!has_id) return onNotification(method, params);
    onRequest(id, method, params);
  }

  void onNotification(const std::string& method, const json& params) {
    if (method == "notifications/cancelled" && params.contains("requestId"))
      cancel(params["requestId"]);
    // notifications/initialized and anything else: nothing to do.
  }

  void onRequest(const json& id, const std::string& method, const json& params) {
    if (method == "ping") return send(resultMessage(id, json::object()), true);
    if (method == "initialize") return initialize(id, params);
    if (method == "tools/list")
      return send(resultMessage(id, json{{"tools", tools_->listed()}}), true);
    if (method == "tools/call") return toolsCall(id, params);
    send(errorMessage(id, kMethodNotFound, "method not found: " + method), true);
  }

  void initialize(const json& id, const json& params) {
    if (!params.contains("protocolVersion") || !params["protocolVersion"].is_string())
      return send(errorMessage(id, kInvalidParams,
                               "invalid params: protocolVersion is required (a string)"),
                  true);
    const std::string asked = params["protocolVersion"];
    std::string version = kDefaultProtocolVersion;
    for (const char* v : kProtocolVersions)
      if (asked == v) version = v;
    const json caps = params.value("capabilities", json::object());
    // Form-mode elicitation: declared as {} (before 2025-11-25) or with a `form` member.
    if (caps.is_object() && caps.contains("elicitation") && caps["elicitation"].is_object()) {
      const json& el = caps["elicitation"];
      elicit_->setSupported(el.empty() || el.contains("form"));
    }
    send(resultMessage(
             id,
             json{{"protocolVersion", version},
                  {"capabilities", {{"tools", {{"listChanged", false}}}}},
                  {"serverInfo", {{"name", "sluice"}, {"version", kSluiceVersion}}},
                  {"instructions",
                   "Tools run in one sandbox for this connection (workflow " + options_.workflow +
                       "): files in /work, /tmp and /output persist between calls; network "
                       "access is only what the workflow's egress policy allows "
                       "(explain_egress says what it decides)."}}),
         true);
    std::lock_guard lock(work_mu_);
    if (!session_queued_) {
      session_queued_ = true;
      jobs_.push_back(ToolJob{nullptr, "", nullptr, true});
      work_cv_.notify_all();
    }
  }

  void toolsCall(const json& id, const json& params) {
    if (!params.contains("name") || !params["name"].is_string())
      return send(errorMessage(id, kInvalidParams, "invalid params: name is required (a string)"),
                  true);
    const std::string name = params["name"];
    const json args = params.value("arguments", json::object());
    if (auto ok = McpTools::validate(name, args); !ok)
      return send(errorMessage(id, kInvalidParams, "invalid params: " + ok.error()), true);
    std::unique_lock lock(work_mu_);
    // Back-pressure: while max_queued_calls wait, stop reading (the client's writes block).
    work_cv_.wait(lock, [&] { return jobs_.size() < options_.max_queued_calls || stopping_; });
    if (stopping_) return;
    jobs_.push_back(ToolJob{id, name, args, false});
    work_cv_.notify_all();
  }

  // notifications/cancelled: a queued call is dropped, the running one stopped; neither is
  // answered (the client has stopped waiting for it).
  void cancel(const json& request_id) {
    std::lock_guard lock(work_mu_);
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
      if (!it->open_session && it->id == request_id) {
        jobs_.erase(it);
        work_cv_.notify_all();
        return;
      }
    if (running_id_ && *running_id_ == request_id) {
      running_cancelled_ = true;
      if (running_stop_fd_ >= 0) (void)!::write(running_stop_fd_, "x", 1);
    }
  }

  // --- tool calls ----------------------------------------------------------------------
  void workLoop() {
    for (;;) {
      ToolJob job;
      int stop_pipe[2] = {-1, -1};
      {
        std::unique_lock lock(work_mu_);
        work_cv_.wait(lock, [&] { return !jobs_.empty() || work_done_ || stopping_; });
        if (jobs_.empty() || stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        work_cv_.notify_all();  // room in the queue for the reader
        if (::pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) == 0) running_stop_fd_ = stop_pipe[1];
        running_id_ = job.id;
        running_cancelled_ = false;
      }
      json result;
      // Without initialize (or before it), the first call that needs the sandbox opens it.
      if (job.open_session || (!session_opened_ && job.tool != "explain_egress")) openSession();
      if (!job.open_session) result = tools_->call(job.tool, job.args, stop_pipe[0]);
      bool cancelled = false;
      {
        std::lock_guard lock(work_mu_);
        cancelled = running_cancelled_;
        running_id_.reset();
        running_stop_fd_ = -1;
      }
      for (int fd : stop_pipe)
        if (fd >= 0) ::close(fd);
      // Questions about approvals that ended with the call (timed out, refused when its command
      // ended) are withdrawn before its answer.
      elicit_->withdrawSettled(
          [this](const std::string& id) { return engine_->approvals().find(id).has_value(); });
      if (!job.open_session && !cancelled) send(resultMessage(job.id, std::move(result)), true);
    }
  }

  // The session sandbox (at initialize, so the first call does not wait for it); approvals for
  // it are watched from then on. A failure is reported by each tool call that needs it.
  void openSession() {
    if (session_opened_) return;  // a call before initialize opened it already
    session_opened_ = true;
    auto id = tools_->open();
    if (id) watchApprovals(*id);
  }

  // Approvals raised for this session (its proxy listener's execution id is the session id):
  // with --approve-with, the operator's command answers them (the client is not asked);
  // otherwise they are put to the user by elicitation when the client declared it, or wait for
  // another approver (sluice approvals) until their timeout. The watcher runs on a proxy
  // thread: it only queues the request; the answer comes back through the reader.
  void watchApprovals(const std::string& session_id) {
    proxy::ApprovalDesk& desk = engine_->approvals();
    if (!options_.approve_with.empty()) {
      approve_with_ = std::make_unique<sluice::execution::ApproveWith>(
          engine_->approvalsShared(), options_.approve_with, session_id);
      return;
    }
    approval_watch_ = desk.watch(session_id, [this, &desk](const proxy::Approval& a) {
      elicit_->ask(a, [&desk](const std::string& id, bool allow) {
        desk.answer(id, allow, proxy::Scope::kOnce, "mcp");
      });
    });
  }
  void unwatchApprovals() {
    if (approval_watch_) engine_->approvals().unwatch(*approval_watch_);
    approval_watch_.reset();
    approve_with_.reset();
  }

  McpOptions options_;
  Metrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<McpTools> tools_;
  std::unique_ptr<Elicitation> elicit_;
  int wake_[2] = {-1, -1};
  int out_fd_ = -1;

  std::mutex out_mu_;
  std::condition_variable out_cv_;  // out_bytes_ went down, or the client is gone
  std::size_t out_bytes_ = 0;       // queued on writer_, not yet written
  bool out_broken_ = false;
  base::BackgroundLoop writer_{"sluice-mcp-out"};

  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<ToolJob> jobs_;
  bool work_done_ = false;
  bool stopping_ = false;
  bool session_queued_ = false;
  std::optional<json> running_id_;
  bool running_cancelled_ = false;
  int running_stop_fd_ = -1;
  std::thread worker_;
  bool session_opened_ = false;  // worker thread only
  std::optional<std::uint64_t> approval_watch_;
  std::unique_ptr<sluice::execution::ApproveWith> approve_with_;
};

}  // namespace

McpServer::~McpServer() = default;

std::expected<std::unique_ptr<McpServer>, std::string> McpServer::create(McpOptions options) {
  auto s = std::make_unique<McpServerImpl>(std::move(options));
  if (auto r = s->init(); !r) return std::unexpected(r.error());
  return s;
}

}  // namespace sluice::serve
