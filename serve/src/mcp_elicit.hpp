// Approvals put to the user of an MCP client (DESIGN.md "sluice mcp"): an `ask` match in this
// connection's session becomes an `elicitation/create` request naming host, port, method and
// path, with the schema {"allow": boolean}; only `action: "accept"` with `allow: true` allows.
// Declines, cancels, errors and anything malformed deny. Requests go out through the
// connection's writer and are never waited for here: the answer arrives with the client's
// response, in the reader loop (onResponse).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "sluice/proxy/approvals.hpp"

namespace sluice::serve {

class Elicitation {
 public:
  /// Hands a JSON-RPC message to the connection's writer (must not block).
  using Send = std::function<void(nlohmann::json)>;
  /// Decides approval `approval_id` (on the approval desk).
  using Answer = std::function<void(const std::string& approval_id, bool allow)>;

  explicit Elicitation(Send send) : send_(std::move(send)) {}

  /// Whether the client declared form-mode elicitation at initialize.
  void setSupported(bool yes);
  bool supported() const;

  /// Asks the user about `a` when the client supports elicitation (true), else nothing (false:
  /// the approval waits for another approver or its timeout). Does not block.
  bool ask(const proxy::Approval& a, Answer answer);

  /// The client's response to one of our requests (an object with id and result or error):
  /// decides its approval; a response to nothing of ours is ignored.
  void onResponse(const nlohmann::json& msg);

  /// Withdraws the questions whose approval is no longer pending (`pending(id)` false: it timed
  /// out, its execution ended, another approver answered): each gets notifications/cancelled,
  /// so the client can close its dialog. Its answer, if one still comes, is ignored.
  void withdrawSettled(const std::function<bool(const std::string& approval_id)>& pending);

  /// The elicitation/create request for `a` with JSON-RPC id `id` (exposed for tests).
  static nlohmann::json request(const proxy::Approval& a, const nlohmann::json& id);
  /// Whether a response allows: only result.action == "accept" with content.allow == true.
  static bool allows(const nlohmann::json& response);

 private:
  Send send_;
  mutable std::mutex mu_;
  bool supported_ = false;
  std::uint64_t next_id_ = 1;
  std::map<std::string, std::pair<std::string, Answer>> outstanding_;  // id -> approval
};

}  // namespace sluice::serve
