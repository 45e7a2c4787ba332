// A listener's policy as one value: the compiled matcher and its generation, swapped whole (a
// live update or a SIGHUP reload) so that a decision and the rows it produces never mix two
// policies.
#pragma once

#include <cstdint>
#include <memory>

#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

struct PolicySnapshot {
  std::shared_ptr<const policy::Matcher> matcher;
  /// 1 for the policy a listener started with, +1 per swap (audit column policy_generation).
  std::uint64_t generation = 1;

  const policy::Workflow& workflow() const { return matcher->workflow(); }
};

}  // namespace sluice::proxy
