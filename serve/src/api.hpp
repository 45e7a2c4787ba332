// The API's routes (DESIGN.md "sluice serve", schemas/api.v1.yaml): requests in, JSON or NDJSON
// out, errors as {"error","reason","detail"}. Executions run on worker threads (the runner
// blocks; workers.hpp); the handler waits for them on its connection's strand.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "engine.hpp"
#include "http_server.hpp"
#include "metrics.hpp"
#include "sessions.hpp"
#include "workers.hpp"

namespace sluice::serve {

/// The JSON error body.
std::string errorBody(int status, const std::string& reason, const std::string& message,
                      const std::string& detail = "");

class Api {
 public:
  Api(Engine& engine, Metrics& metrics, SessionManager& sessions)
      : engine_(engine), metrics_(metrics), sessions_(sessions) {}

  net::awaitable<void> handle(Request& req, Reply& reply);

  /// New work is refused with 503 draining from now on.
  void startDraining() { draining_ = true; }
  /// Waits until no execution runs, or `timeout`; then stops those left and waits for them
  /// (their receipts are stored).
  void waitForExecutions(std::chrono::milliseconds timeout);

 private:
  struct RunSlot;
  /// A whole answer (status, content type, body).
  struct Answer {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    /// Released once the answer is written (or its client is gone): work that should not
    /// compete with the answer (Engine::run's `after_answer`).
    std::shared_ptr<void> after{};
  };
  using Work = std::function<base::Result<Answer>(const std::function<void(std::string)>& lines,
                                                  int stop_fd)>;
  /// Runs `work` on a thread of its own (the runner blocks) and answers with its result; with
  /// `stream`, NDJSON lines as they come and the receipt last. Drain waits for it.
  net::awaitable<void> offload(Reply& reply, Work work, bool stream);
  /// Writes the lines `slot` receives as an NDJSON stream until its work is done; false once
  /// the client is gone (its execution is then stopped). `streaming`: the stream has begun.
  net::awaitable<bool> pumpLines(Reply& reply, RunSlot& slot, bool& streaming);
  /// The work's answer: a reply, or the last line of a stream.
  net::awaitable<void> sendAnswer(Reply& reply, base::Result<Answer>& answer, bool stream,
                                  bool streaming);
  net::awaitable<void> sessionRoute(Request& req, Reply& reply, const std::string& rest);
  net::awaitable<void> postRun(Request& req, Reply& reply);
  net::awaitable<void> approvals(Request& req, Reply& reply, const std::string& path);
  Work makeSessionCreate(Caller caller, nlohmann::json body);
  Work makeSessionExec(Caller caller, std::string id, nlohmann::json body);
  Work makeSessionEnd(Caller caller, std::string id);
  Work makePolicyPut(Caller caller, std::string id, std::string yaml);
  Work makeFilePut(Caller caller, std::string id, std::string path,
                   std::shared_ptr<SpooledBody> data);
  Work makeFileGet(Caller caller, std::string id, std::string path);
  net::awaitable<void> getExecution(Request& req, Reply& reply, const std::string& id);
  net::awaitable<void> error(Reply& reply, const ApiError& e);
  /// Answers with the edge's rendering of `e` (apiError), logging a server error's causes.
  net::awaitable<void> error(Reply& reply, const base::Error& e);

  Engine& engine_;
  Metrics& metrics_;
  SessionManager& sessions_;
  std::atomic<bool> draining_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  std::set<std::shared_ptr<RunSlot>> running_;
  Workers workers_;
};

}  // namespace sluice::serve
