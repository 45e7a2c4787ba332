// The JSON of one policy explanation: what `sluice policy explain --json` prints and what the
// MCP tool `explain_egress` returns as structuredContent (one object, one definition).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sluice/policy/explain.hpp"

namespace sluice::policy {

/// {"decision","workflow","rule","reason","detail","nearest_miss","inject","secrets","phase",
///  "method","path","tls"[,"note"]} (DESIGN.md "Command line": policy explain --json).
inline nlohmann::json explanationJson(const Explanation& ex, const std::string& workflow) {
  const auto& d = ex.decision;
  auto orNull = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  nlohmann::json j = {
      {"decision", std::string(decisionName(d))},
      {"workflow", workflow},
      {"rule", orNull(d.rule_id)},
      {"reason", std::string(reasonName(d.reason))},
      {"detail", d.detail},
      {"nearest_miss", orNull(d.nearest_miss)},
      {"inject", ex.inject_headers},
      {"secrets", ex.inject_secrets},
      {"phase", ex.phase},
      {"method", orNull(ex.method)},
      {"path", orNull(ex.path)},
      {"tls", d.allowed || d.ask ? std::string(tlsModeName(d.tls)) : std::string()}};
  if (!ex.note.empty()) j["note"] = ex.note;
  return j;
}

}  // namespace sluice::policy
