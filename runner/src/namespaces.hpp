// Network-namespace plumbing for the child: bring `lo` up, create the proxy listener inside the
// namespace and pass it to the parent over a unix socketpair (SCM_RIGHTS).
#pragma once

#include <cstdint>

#include "step.hpp"

namespace sluice::runner::detail {

/// The address the proxy listens on inside every sandbox (DESIGN.md).
inline constexpr std::uint16_t kProxyPort = 3128;

/// Sets IFF_UP on `lo` of the calling process's network namespace (child side).
StepResult bringUpLoopback();

/// Creates a TCP socket listening on 127.0.0.1:kProxyPort in the current namespace, sends it
/// over `channel` and closes the child's copy (child side).
StepResult sendProxyListener(int channel);

/// Receives one fd sent with SCM_RIGHTS; -1 with errno on failure (parent side).
int receiveFd(int channel);

}  // namespace sluice::runner::detail
