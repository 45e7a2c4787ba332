// Strict JSON: the one parser for every JSON text sluice accepts from outside (API bodies,
// MCP JSON-RPC lines, the daemon's answers to `sluice approvals`). It is nlohmann::json's
// parser with one rule added: an object may name a key once. `{"decision":"deny",
// "decision":"allow"}` is refused, naming the key and where it is, instead of silently keeping
// the last value (which another reader, a proxy or a log, may read as the first).
// Reference: docs/approvals.md ("Strict JSON").
#pragma once

#include <cstddef>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sluice::base {

/// Why a text is not strict JSON, and where (1-based line and column of the offending byte:
/// for a duplicate key, its opening quote).
struct JsonParseError {
  std::string message;  ///< e.g. `duplicate key "decision" (an object may name a key once)`
  std::size_t line = 1;
  std::size_t column = 1;
  bool duplicate_key = false;
  /// "line L, column C: MESSAGE".
  std::string describe() const;
};

/// Parses `text` as one JSON value; refuses syntax errors and duplicate keys (compared after
/// unescaping, so `"a"` and `"\u0061"` are the same key) in any object at any depth.
std::expected<nlohmann::json, JsonParseError> parseStrictJson(std::string_view text);

}  // namespace sluice::base
