// `sluice policy learn`: the tightest workflow that allows what recorded executions did (their
// allowed and would_deny connections and requests), as YAML with a comment per rule giving the
// requests it covers. docs/policy.md, "Learn, review, replay".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/replay/history.hpp"

namespace sluice::replay {

/// The workflow `name` learned from `executions` (each must be in the store), as YAML that
/// `sluice policy check` accepts without warnings.
base::Result<std::string> learn(History& history, const std::vector<std::string>& executions,
                                const std::string& name);

/// A path with every segment that varies like an identifier (a number, a UUID, a hex hash, a
/// long random token) written as `*`: `/v1/items/123/parts` -> `/v1/items/*/parts`. Other
/// segments are kept, with glob characters in them written as `?`.
std::string pathShape(std::string_view path);

}  // namespace sluice::replay
