// A session's file operations, from the host into a running sandbox: paths are parsed
// (sandbox_paths.hpp), then resolved from a directory fd of the sandbox's root with openat2
// (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so neither ".." nor an absolute symlink can leave
// the sandbox; the directory reached must lie on the scratch tmpfs (its st_dev), so a link to
// /proc, /dev, /etc or /input is refused; the file itself is opened relative to that directory
// with O_NOFOLLOW | O_NONBLOCK and checked to be a regular file on the same tmpfs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/runner/session.hpp"

namespace sluice::runner::detail {

struct SandboxRoot {
  int root_fd = -1;       // O_PATH directory fd of the sandbox's "/" (init's root)
  dev_t scratch_dev = 0;  // st_dev of the scratch tmpfs behind /work, /tmp and /output
  uid_t uid = 65534;      // owner of what writeSandboxFile creates
  gid_t gid = 65534;
};

/// st_dev of /work seen from `root_fd` (the scratch tmpfs), or an error.
std::expected<dev_t, std::string> scratchDevice(int root_fd);

std::expected<FileInfo, std::string> writeSandboxFile(const SandboxRoot& root,
                                                      const std::string& path,
                                                      std::string_view data);
/// As writeSandboxFile, copying what `from` reads (to its end) in chunks.
std::expected<FileInfo, std::string> writeSandboxFileFrom(const SandboxRoot& root,
                                                          const std::string& path, int from);
std::expected<std::string, std::string> readSandboxFile(const SandboxRoot& root,
                                                        const std::string& path,
                                                        std::uint64_t max_bytes);
std::expected<std::vector<FileInfo>, std::string> listSandboxDir(const SandboxRoot& root,
                                                                 const std::string& path);

}  // namespace sluice::runner::detail
