// The sandboxed program's environment: nothing from the host; a fixed base, the proxy variables
// when the network goes through the proxy, and what --env adds.
#pragma once

#include <expected>
#include <string>
#include <vector>

namespace sluice::runner {

/// The PATH every sandboxed program gets.
inline constexpr const char* kSandboxPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Builds the environment: PATH, HOME=/work, TMPDIR=/tmp, LANG=C.UTF-8, USER/LOGNAME; with
/// `network_proxy` also HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy, ALL_PROXY (and
/// all_proxy) = http://127.0.0.1:3128 and NO_PROXY/no_proxy empty; then each `extra` K=V.
/// Errors: malformed K=V, a name given twice, or an attempt to replace a fixed variable.
std::expected<std::vector<std::string>, std::string> buildEnvironment(
    const std::vector<std::string>& extra, bool network_proxy);

}  // namespace sluice::runner
