// What the inspected WebSocket relay does to text messages (websocket_relay.hpp).
#include "websocket_relay.hpp"

#include "injection.hpp"
#include "placeholder.hpp"
#include "request_body.hpp"

namespace sluice::proxy {

std::optional<std::pair<ws::FrameRelay, ws::FrameRelay>> webSocketRelays(
    const std::string& rule_id, std::shared_ptr<const policy::SecretStore> secrets,
    const std::vector<Placeholder>& placeholders, const std::vector<std::string>& injected) {
  // Redacted from server messages: the secrets injected on this connection and the one the
  // rule's placeholder stands for (swapped into client messages below).
  std::vector<std::string> names = injected;
  for (const auto& ph : placeholders)
    if (ph.rule_id == rule_id) names.push_back(ph.secret);
  std::vector<std::string_view> values;
  for (const auto& n : names)
    if (auto v = secrets ? secrets->find(n) : std::nullopt; v && !v->empty()) values.push_back(*v);
  if (placeholders.empty() && values.empty()) return std::nullopt;
  ws::FrameRelay::TextHook up;
  if (!placeholders.empty())
    up = [rule_id, secrets, placeholders](std::string& message) {
      // The same one detection and swap as for every other part of a request.
      auto hits = findPlaceholders(message, rule_id, placeholders);
      if (hits.leak) return ws::TextVerdict::kRefuse;
      std::vector<std::string> swapped;
      if (hits.own && swapPlaceholders(message, rule_id, secrets.get(), placeholders, swapped))
        return ws::TextVerdict::kRefuse;  // the secret is gone from the store
      return ws::TextVerdict::kPass;
    };
  ws::FrameRelay::TextHook down;
  if (!values.empty())
    down = [secrets, values](std::string& message) {
      redactValues(message, values, kRedacted);
      return ws::TextVerdict::kPass;
    };
  return std::make_pair(ws::FrameRelay(std::move(up), kWholeBodyBytes),
                        ws::FrameRelay(std::move(down), kWholeBodyBytes));
}

void noteClose(audit::ConnectionEvent& row, const ws::CloseWith& closing) {
  if (closing.code == 1008 && closing.reason == "placeholder_leak") {
    row.reason = std::string(policy::reasonName(policy::Reason::kPlaceholderLeak));
    row.detail = "WebSocket closed (1008): a client text frame carried another rule's placeholder";
  } else {
    row.detail = "WebSocket closed (" + std::to_string(closing.code) + "): " + closing.reason;
  }
  log().warn("WebSocket on {} closed by the proxy ({}): {}", row.host, closing.code,
             closing.reason);
}

}  // namespace sluice::proxy
