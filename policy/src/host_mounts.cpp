// The rules for a policy's read-only host mounts (docs/policy.md "`sandbox.mounts`").
#include "sluice/policy/host_mounts.hpp"

#include <algorithm>

namespace sluice::policy {
namespace {

// Host paths that hold secrets or sluice's own state: never shown, nor anything containing
// them. Backups (shadow-) and the sudoers drop-in directory count as the files they copy.
constexpr std::string_view kSecretSources[] = {"/etc/shadow",   "/etc/shadow-",
                                               "/etc/gshadow",  "/etc/gshadow-",
                                               "/etc/ssh",      "/etc/ssl/private",
                                               "/etc/sudoers",  "/etc/sudoers.d",
                                               "/etc/security", "/etc/machine-id",
                                               "/root",         "/var/lib/sluice",
                                               "/etc/sluice",   "/run/sluice",
                                               "/proc",         "/sys",
                                               "/dev",          "/boot",
                                               "/var/lib/sudo"};

// Trees the sandbox makes itself: a mount at, above or beneath one would hide or replace
// them. /proc, /sys and /dev are the kernel's; the rest are sluice's binds and scratch.
constexpr std::string_view kSandboxTrees[] = {
    "/proc",  "/sys",    "/dev",  "/usr", "/bin",    "/sbin",  "/lib",     "/lib32",
    "/lib64", "/libx32", "/work", "/tmp", "/output", "/input", "/var/tmp", "/var/cache"};

// Files sluice writes or binds under /etc: a mount at or above one would replace it.
constexpr std::string_view kSandboxEtcFiles[] = {
    "/etc/passwd",        "/etc/group",
    "/etc/hosts",         "/etc/hostname",
    "/etc/nsswitch.conf", "/etc/resolv.conf",
    "/etc/ld.so.cache",   "/etc/localtime",
    "/etc/mtab",          "/etc/ssl/certs/ca-certificates.crt"};

bool atOrBeneath(std::string_view p, std::string_view dir) {
  return p == dir || (p.starts_with(dir) && p.size() > dir.size() && p[dir.size()] == '/');
}

// `p` contains `q` (or is it): a mount of `p` would show `q`, or a mount at `p` hide it.
bool atOrAbove(std::string_view p, std::string_view q) { return p == "/" || atOrBeneath(q, p); }

}  // namespace

std::optional<std::string> notNormalisedPath(std::string_view path) {
  if (path.empty() || path.front() != '/') return "must be an absolute path";
  if (std::any_of(path.begin(), path.end(), [](char c) { return c >= 0 && c < 0x20; }))
    return "must not contain control characters";
  if (path.size() > 1 && path.back() == '/') return "must not end with '/'";
  for (std::size_t start = 1; start < path.size();) {
    std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return "must be normalised (no '//', '.' or '..' parts)";
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> mountSourceProblem(std::string_view source,
                                              const std::vector<std::string>& extra) {
  if (auto bad = notNormalisedPath(source)) return bad;
  for (std::string_view secret : kSecretSources) {
    if (atOrBeneath(source, secret))
      return "is (or is under) " + std::string(secret) + ", which holds secrets or host state";
    if (atOrAbove(source, secret))
      return "contains " + std::string(secret) + ", which holds secrets or host state";
  }
  for (const std::string& secret : extra) {
    if (atOrBeneath(source, secret) || atOrAbove(source, secret))
      return "overlaps " + secret + ", where sluice's secrets are";
  }
  return std::nullopt;
}

std::optional<std::string> mountTargetProblem(std::string_view target) {
  if (auto bad = notNormalisedPath(target)) return bad;
  if (target == "/" || target == "/etc")
    return "would hide the sandbox's own " + std::string(target);
  for (std::string_view tree : kSandboxTrees) {
    if (atOrBeneath(target, tree) || atOrAbove(target, tree))
      return "would hide or replace the sandbox's " + std::string(tree);
  }
  for (std::string_view file : kSandboxEtcFiles) {
    if (atOrAbove(target, file)) return "would hide or replace the sandbox's " + std::string(file);
  }
  return std::nullopt;
}

}  // namespace sluice::policy
