// Which host paths a policy's `sandbox.mounts` may show in the sandbox, and where (read-only
// always). The rules are lexical: the runner resolves the source on the host at run time and
// refuses one that is not its own real path (a symlink could lead anywhere).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::policy {

/// Why `path` is not an absolute, normalised path (no empty, "." or ".." parts, no trailing
/// "/", no control characters), or nullopt.
std::optional<std::string> notNormalisedPath(std::string_view path);

/// Why a host path may not be a mount's source, or nullopt: secrets and sluice's own state
/// (/etc/shadow, /etc/ssh, /var/lib/sluice, ...), the host's /proc, /sys and /dev, and any
/// directory containing one of them (/, /etc, /var). `extra` adds paths the caller knows to be
/// secret (the directory of a --secrets file).
std::optional<std::string> mountSourceProblem(std::string_view source,
                                              const std::vector<std::string>& extra = {});

/// Why a sandbox path may not be a mount's target, or nullopt: under /proc, /sys or /dev, or
/// at, above or beneath one of the sandbox's own mounts (/, /usr, /work, /tmp, /etc/passwd,
/// ...), which it would hide or replace.
std::optional<std::string> mountTargetProblem(std::string_view target);

}  // namespace sluice::policy
