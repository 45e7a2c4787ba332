// MCP elicitation for approvals (mcp_elicit.hpp).
#include "mcp_elicit.hpp"

#include <vector>

#include "sluice/runner/receipt.hpp"

namespace sluice::serve {
using nlohmann::json;

namespace {

std::string utcTime(std::int64_t ms) {
  return runner::formatTimestamp(
      std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

}  // namespace

void Elicitation::setSupported(bool yes) {
  std::lock_guard lock(mu_);
  supported_ = yes;
}

bool Elicitation::supported() const {
  std::lock_guard lock(mu_);
  return supported_;
}

json Elicitation::request(const proxy::Approval& a, const json& id) {
  // What the sandboxed code sent (host, path) is shown escaped and cut: a client may render the
  // message on a terminal, where raw ESC or CR bytes would rewrite what the user reads.
  const std::string target = proxy::displayText(a.host + ":" + std::to_string(a.port), 300);
  std::string what = a.method && a.path ? proxy::displayText(*a.method, 32) + " " +
                                              proxy::displayText(*a.path, 300) + " on " + target
                                        : "a connection to " + target +
                                              " (CONNECT; the requests "
                                              "inside are not visible)";
  const proxy::ScopeCovers covers = proxy::scopeCovers(a);
  std::string message = "sluice: the sandbox wants to reach " + target + ". Allow " + what +
                        "? Rule '" + proxy::displayText(a.rule) + "' of workflow '" +
                        proxy::displayText(a.workflow) + "' asks for approval; with no answer by " +
                        utcTime(a.expires_at_ms) + " it is refused. Your answer here covers " +
                        covers.once +
                        " (scope once). Wider scopes, answered by an --approve-with command: "
                        "execution = " +
                        covers.execution + "; host = " + covers.host + ". (approval " + a.id + ")";
  json schema = {
      {"type", "object"},
      {"properties",
       {{"allow", {{"type", "boolean"}, {"title", "Allow"}, {"description", "Allow " + what}}}}},
      {"required", json::array({"allow"})}};
  return json{{"jsonrpc", "2.0"},
              {"id", id},
              {"method", "elicitation/create"},
              {"params", {{"message", message}, {"requestedSchema", schema}}}};
}

bool Elicitation::allows(const json& response) {
  if (!response.is_object() || !response.contains("result")) return false;
  const json& r = response["result"];
  if (!r.is_object() || r.value("action", json()) != "accept") return false;
  if (!r.contains("content") || !r["content"].is_object()) return false;
  const json& allow = r["content"].value("allow", json());
  return allow.is_boolean() && allow.get<bool>();
}

bool Elicitation::ask(const proxy::Approval& a, Answer answer) {
  json id;
  {
    std::lock_guard lock(mu_);
    if (!supported_) return false;
    id = "sluice-approval-" + std::to_string(next_id_++);
    outstanding_[id.dump()] = {a.id, std::move(answer)};
  }
  send_(request(a, id));
  return true;
}

void Elicitation::withdrawSettled(const std::function<bool(const std::string&)>& pending) {
  std::vector<std::pair<json, std::string>> settled;  // request id, approval id
  {
    std::lock_guard lock(mu_);
    for (auto it = outstanding_.begin(); it != outstanding_.end();) {
      if (pending(it->second.first)) {
        ++it;
        continue;
      }
      settled.emplace_back(json::parse(it->first), it->second.first);
      it = outstanding_.erase(it);
    }
  }
  for (const auto& [id, approval] : settled)
    send_(json{{"jsonrpc", "2.0"},
               {"method", "notifications/cancelled"},
               {"params",
                {{"requestId", id},
                 {"reason", "approval " + approval +
                                " is no longer pending (timed out, answered elsewhere, or its "
                                "command ended)"}}}});
}

void Elicitation::onResponse(const json& msg) {
  std::pair<std::string, Answer> found;
  {
    std::lock_guard lock(mu_);
    auto it = outstanding_.find(msg["id"].dump());
    if (it == outstanding_.end()) return;
    found = std::move(it->second);
    outstanding_.erase(it);
  }
  found.second(found.first, allows(msg));
}

}  // namespace sluice::serve
