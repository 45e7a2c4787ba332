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
  /// The listener's learn mode (ListenerIdentity::learn), on the copy a swap re-decides that
  /// listener's open tunnels and held approvals with (policy_cut.hpp), so they are judged as
  /// its admission judged them; the listener's own snapshot leaves it false.
  bool learn = false;

  const policy::Workflow& workflow() const { return matcher->workflow(); }
};

}  // namespace sluice::proxy
