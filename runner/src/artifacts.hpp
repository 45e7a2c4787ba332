// Files the program wrote to /output: listed with size and SHA-256 and copied to --output-dir.
// Read through /proc/<init>/root/output while the sandbox's mount namespace is still alive.
// What the sandbox wrote is hostile input: collecting it must never cost the host more than
// the sandbox itself could hold (docs/sandbox.md "Artifacts").
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

inline constexpr int kMaxArtifactEntries = 10000;  // directory entries read, all levels
inline constexpr int kMaxArtifactDepth = 32;       // directories below `source` entered

struct CollectedArtifacts {
  std::vector<Artifact> files;                  // in walk order (sorted by name per directory)
  std::optional<ArtifactsTruncated> truncated;  // what was left behind, if anything
};

/// Walks the directory `source`, hashing every regular file, and copies each to
/// `dest`/<relative path> when `dest` is not empty (sparse-aware: holes stay holes).
/// Never follows a symlink on either side (every open is O_NOFOLLOW relative to its parent's
/// fd); symlinks, fifos, sockets and devices are skipped without being opened.
/// Bounded, each bound reported in `truncated`: a file is taken only while the sum of
/// max(apparent size, allocated blocks) of the files taken fits in `budget` (0: no budget of
/// its own) and in the size of the file system holding `source` (the sandbox's tmpfs);
/// at most kMaxArtifactEntries entries and kMaxArtifactDepth levels; names with a control
/// character or invalid UTF-8 are skipped. An error is a host-side failure (`dest` unwritable).
std::expected<CollectedArtifacts, std::string> collectArtifacts(const std::filesystem::path& source,
                                                                const std::filesystem::path& dest,
                                                                std::uint64_t budget);

/// True when `name` is valid UTF-8 (no overlong forms, surrogates or code points above
/// U+10FFFF) and holds no control character (bytes below 0x20, 0x7f).
bool safeArtifactName(std::string_view name);

}  // namespace sluice::runner::detail
