// The sandbox's file system: a plan computed in the parent (which may allocate) and applied in
// the child (which must not): pivot_root into a fresh tmpfs holding read-only binds of the
// system dirs, a generated /etc, fresh /proc, a minimal /dev and one size-limited scratch tmpfs
// behind /work, /tmp, /output and /dev/shm.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "sluice/runner/sandbox.hpp"
#include "step.hpp"

namespace sluice::runner::detail {

struct MountOp {
  enum class Kind : std::uint8_t {
    kMkdir,       // path, mode
    kSymlink,     // target -> path
    kBindRo,      // source -> path, read-only, nosuid, nodev
    kBindRw,      // source -> path, nosuid, nodev
    kTouch,       // empty file at path (a bind target)
    kWriteFile,   // content -> path, mode
    kTmpfs,       // tmpfs at path with data options
    kProc,        // proc at path
    kDevpts,      // new devpts instance at path
    kMknod,       // character device dev at path, mode 0666
    kChown,       // path to uid/gid
  };
  Kind kind;
  std::string path;    // absolute, under the new root's mount point
  std::string source;  // bind source / symlink target / tmpfs options
  std::string content;
  unsigned mode = 0755;
  dev_t dev = 0;
  const char* step = "";  // static text naming the step for errors
};

struct MountPlan {
  std::string new_root;  // mount point of the new root tmpfs (host path)
  std::string scratch;   // mount point of the scratch tmpfs (host path, outside new_root)
  std::vector<MountOp> ops;  // applied in order, before pivot_root
};

/// The host directory every sandbox mounts its private root on (inside its own mount
/// namespace, so concurrent runs do not see each other). Created on demand.
inline constexpr const char* kNewRootDir = "/run/sluice/root";
/// Where the scratch tmpfs is first mounted (in the private mount namespace). It lies in the
/// old root, so the single detach of the old root after pivot_root also drops this mount point
/// (each umount costs an RCU grace period).
inline constexpr const char* kScratchDir = "/run/sluice/scratch";

/// Builds the plan (parent side): reads the host's /usr, /lib* layout, ld.so.cache etc.
std::expected<MountPlan, SetupError> buildMountPlan(const RunSpec& spec);

/// Applies the plan and pivots into the new root (child side; no allocation). Scratch dirs
/// (/work, /output) are owned by uid/gid.
StepResult applyMountPlan(const MountPlan& plan, uid_t uid, gid_t gid);

}  // namespace sluice::runner::detail
