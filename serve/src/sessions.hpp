// Sessions (`/v1/sessions`): one sandbox per session whose /work, /tmp and /output persist
// between execs, bounded as a whole by the workflow's memory/pids/disk and network limits; each
// exec gets its own receipt (with `session_id`); idle timeout and TTL end a session, and every
// session ends with a summary receipt in the audit store. Sessions belong to their caller:
// anyone else gets 404. How many may be open, in all and per caller, is a Quota (quotas.hpp);
// `ttl` and `idle_timeout` may not exceed the daemon's ceiling (docs/serve.md "Quotas").
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine.hpp"
#include "quotas.hpp"

namespace sluice::serve {

/// A session as the API asks for it (POST /v1/sessions), parsed at the edge.
struct SessionRequest {
  std::string workflow;
  std::optional<std::chrono::milliseconds> idle_timeout, ttl;  ///< none: the defaults
  bool learn = false;  ///< "learn": true (refused unless ServeOptions::allow_learn)
  /// "shadow_policy": a candidate workflow (YAML text, the session's workflow name) decided
  /// alongside every connection and request of the session, recorded, not enforced. Empty:
  /// the daemon's --shadow-policy-dir candidate, if any.
  std::string shadow_policy;
};

/// Parses the body of POST /v1/sessions (field errors name the field).
base::Result<SessionRequest> parseSessionRequest(const nlohmann::json& body);

class SessionManager {
 public:
  /// At most `max_sessions` open, `per_caller` of them one caller's (0: no share below the
  /// total); a `ttl` or `idle_timeout` longer than `max_ttl` is refused (400).
  SessionManager(Engine& engine, std::size_t max_sessions, std::size_t per_caller = 0,
                 std::chrono::milliseconds max_ttl = std::chrono::hours(24));
  ~SessionManager();

  /// POST /v1/sessions -> 201 {"id","workflow","created_at","expires_at"}.
  base::Result<nlohmann::json> create(const Caller& caller, const SessionRequest& request);
  /// POST /v1/sessions/{id}/exec -> the exec's receipt (blocking; run on a thread of its own).
  base::Result<nlohmann::json> exec(const Caller& caller, const std::string& id,
                                    const execution::Command& cmd,
                                    const std::function<void(std::string)>& lines, int stop_fd);
  /// PUT /v1/sessions/{id}/files/{path} -> {"path","bytes","sha256"}.
  base::Result<nlohmann::json> putFile(const Caller& caller, const std::string& id,
                                       const std::string& path, const std::string& data);
  /// As putFile, the content read from `fd` (a spooled upload) from its start, in chunks.
  base::Result<nlohmann::json> putFileFrom(const Caller& caller, const std::string& id,
                                           const std::string& path, int fd);
  /// The largest upload session `id` of `caller` can hold (its disk limit), or 404.
  base::Result<std::uint64_t> uploadLimit(const Caller& caller, const std::string& id);
  struct FileBody {
    std::string content_type;
    std::string body;
  };
  /// GET /v1/sessions/{id}/files/{path}: the bytes, or a JSON listing for a directory.
  base::Result<FileBody> getFile(const Caller& caller, const std::string& id,
                                 const std::string& path);
  /// PUT /v1/sessions/{id}/policy -> {"id","workflow","policy_sha256","generation"}: `yaml`
  /// (the workflow's, same name) validated (400 with FILE:LINE:COL diagnostics, the old policy
  /// kept), checked to only narrow unless `caller` is an approver (403 widening_not_allowed
  /// naming what widens), then swapped in the proxy as the session's next generation.
  base::Result<nlohmann::json> setPolicy(const Caller& caller, const std::string& id,
                                         const std::string& yaml);
  /// DELETE /v1/sessions/{id} -> the session's summary receipt.
  base::Result<nlohmann::json> end(const Caller& caller, const std::string& id);

  /// Ends sessions past their idle timeout or TTL (ended_by idle | ttl).
  void reap();
  /// Ends every session (ended_by `why`), e.g. "shutdown".
  void endAll(const std::string& why);
  std::size_t active() const;

 private:
  struct Session;
  base::Result<void> startSandbox(Session& s, bool learn,
                                  std::shared_ptr<const policy::Matcher> shadow);
  base::Result<std::shared_ptr<Session>> find(const Caller& caller, const std::string& id);
  nlohmann::json finish(Session& s, const std::string& ended_by);
  template <typename T, typename Fn>
  base::Result<T> onFile(const Caller& caller, const std::string& id, const std::string& path,
                         Fn fn);
  base::Result<FileBody> readOrList(Session& s, const std::string& path);

  Engine& engine_;
  Quota quota_;
  std::chrono::milliseconds max_ttl_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

}  // namespace sluice::serve
