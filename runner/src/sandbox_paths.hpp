// Sandbox paths a caller names — RunSpec::files, a session's file operations — are confined to
// the scratch space: /work, /tmp and /output, with no "." or ".." component. This file parses
// them, and places RunSpec::files in the scratch tmpfs through the mount plan.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "mounts.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

/// A parsed sandbox path under /work, /tmp or /output.
struct ScratchPath {
  std::string top;                 // "work", "tmp" or "output"
  std::vector<std::string> parts;  // the components below it; empty: the directory itself
  /// "work/a/b": relative to the sandbox's root.
  std::string relative() const;
  /// "/work/a/b".
  std::string sandbox() const { return "/" + relative(); }
};

/// Parses an absolute sandbox path. Repeated or trailing slashes are ignored; refused: a
/// relative path, a "." or ".." component, a NUL byte, a component over 255 bytes, a path over
/// 4096 bytes, and anything not under /work, /tmp or /output. The error says why, naming `path`.
std::expected<ScratchPath, std::string> parseScratchPath(std::string_view path);

/// Appends to `plan` the ops writing `files` into the scratch tmpfs (after everything else is
/// mounted, before pivot_root): missing parent directories (0755) and each file with its mode,
/// all owned by the sandbox uid/gid. Errors (step "sandbox file"): a path parseScratchPath
/// refuses, a path naming a scratch directory itself, a path given twice or used both as a
/// file and as a directory, a mode outside 07777.
base::Result<void> planSandboxFiles(const std::vector<SandboxFile>& files, MountPlan& plan);

}  // namespace sluice::runner::detail
