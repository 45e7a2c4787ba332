// Files the program wrote to /output: listed with size and SHA-256 and copied to --output-dir.
// Read through /proc/<init>/root/output while the sandbox's mount namespace is still alive.
#pragma once

#include <expected>
#include <filesystem>
#include <string>
#include <vector>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

/// Walks the directory `source` (never following a symlink: sandbox-made links are skipped),
/// hashing every regular file, and copies each to `dest`/<relative path> when `dest` is not
/// empty. Bounded: at most 10,000 entries and 32 levels.
std::expected<std::vector<Artifact>, std::string> collectArtifacts(
    const std::filesystem::path& source, const std::filesystem::path& dest);

}  // namespace sluice::runner::detail
