// The one JSON dump: bytes that are not UTF-8 (a hostile path, a binary header) become U+FFFD
// instead of throwing, so output never fails on what a sandbox sent.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace sluice::base {

/// `j` as JSON text; compact unless `indent` >= 0. Never throws on invalid UTF-8.
std::string dumpJson(const nlohmann::json& j, int indent = -1);
/// The same for an object whose keys keep their insertion order (audit exports, proofs).
std::string dumpJson(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace sluice::base
