// The child plan as bytes, for a sandbox whose namespaces were prepared ahead of time
// (prepareSandbox): the helper that built them was forked before the plan existed, so the plan
// travels to it over a pipe. Both ends are the same binary and the helper is a fork of the
// parent, so static text pointers (MountOp::step) and sluice's argv area (arg_start) are valid
// on both sides and travel as addresses.
#pragma once

#include <expected>
#include <string>

#include "child.hpp"

namespace sluice::runner::detail {

std::string encodePlan(const ChildPlan& plan);

/// Rebuilds a plan from encodePlan()'s bytes (argv/envp pointers into its own storage); an
/// error names what was malformed.
std::expected<void, std::string> decodePlan(std::string_view bytes, ChildPlan& plan);

}  // namespace sluice::runner::detail
