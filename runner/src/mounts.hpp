// The sandbox's file system: a plan computed in the parent (which may allocate) and applied in
// the child (which must not): pivot_root into a fresh tmpfs holding read-only binds of the
// system dirs, a generated /etc, fresh /proc with kernel files masked, a minimal /dev, the
// inputs (shown through overlays so the mount table names no host path) and one size-limited
// scratch tmpfs behind /work, /tmp, /output and /dev/shm.
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
    kMkdir,      // path, mode
    kSymlink,    // target -> path
    kBindRo,     // source -> path, read-only, nosuid, nodev
    kBindRw,     // source -> path, nosuid, nodev
    kTouch,      // empty file at path (a bind target)
    kWriteFile,  // content -> path, mode
    kTmpfs,      // tmpfs at path with data options
    kProc,       // proc at path
    kDevpts,     // new devpts instance at path
    kMknod,      // character device dev at path, mode 0666
    kOverlayRo,  // read-only overlay at path showing the directory source (content: its
                 // options); if the kernel refuses it, a read-only bind of source
    kMask,       // hides a /proc entry: binds source (/dev/null) over it, or if source is empty
                 // mounts an empty read-only tmpfs on it
    kChown,      // path to uid/gid; stays last (plan_codec.cpp bounds kinds by it)
  };
  Kind kind;
  std::string path;    // absolute, under the new root's mount point
  std::string source;  // bind source / symlink target / tmpfs options
  std::string content;
  unsigned mode = 0755;
  dev_t dev = 0;
  const char* step = "";         // static text naming the step for errors
  unsigned long keep_flags = 0;  // bind remounts: the source's locked flags (MS_NOEXEC, atime)
};

struct MountPlan {
  // A host directory covered (in the private mount namespace only) by a small staging tmpfs
  // holding the two mount points below. It lies in the old root, so the single detach of the
  // old root after pivot_root drops it too (each umount costs an RCU grace period).
  std::string stage;
  std::string new_root;      // stage + "/root": the new root tmpfs
  std::string scratch;       // stage + "/scratch": the scratch tmpfs (work, tmp, output, shm)
  std::vector<MountOp> ops;  // applied in order, before pivot_root
};

/// The staging directory when running as root (created on demand). Concurrent runs each cover
/// it in their own mount namespace, so they never see each other. Unprivileged runs pick an
/// existing directory that holds no --input (see buildMountPlan).
inline constexpr const char* kStageDir = "/run/sluice";

/// Builds the plan (parent side): reads the host's /usr, /lib* layout, ld.so.cache etc.
/// `user_namespace`: no mknod (device nodes are bound from the host's /dev instead).
base::Result<MountPlan> buildMountPlan(const RunSpec& spec, bool user_namespace);

/// Applies the plan and pivots into the new root (child side; no allocation). Scratch dirs
/// (/work, /output) are owned by uid/gid.
StepResult applyMountPlan(const MountPlan& plan, uid_t uid, gid_t gid);

}  // namespace sluice::runner::detail
