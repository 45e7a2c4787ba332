// Whether a new policy lets through anything the old one did not: the check a live policy update
// by a non-approver must pass (a session's owner may narrow its sandbox, not widen it).
#pragma once

#include <string>
#include <vector>

#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// Every way `next` may allow (or ask for) what `old` does not, one sentence each; empty when
/// `next` is covered by `old`. Conservative: it may call a real narrowing a widening (a rule
/// split differently, a path pattern rewritten), never the reverse. Covered means: each allow
/// rule of `next` lies inside one allow rule of `old` (and each ask rule inside an allow or ask
/// rule) in hosts, ports, cidrs, allow_private, tls mode, methods, paths, path options and
/// injected secrets; every deny and ask rule of `old` is kept (same match; an ask may become a
/// deny); no egress limit is raised and the sandbox gets no network it lacked.
std::vector<std::string> widens(const Workflow& old, const Workflow& next);

}  // namespace sluice::policy
