// Sandbox paths under /work, /tmp and /output (see sandbox_paths.hpp).
#include "sandbox_paths.hpp"

#include <set>

namespace sluice::runner::detail {

std::string ScratchPath::relative() const {
  std::string out = top;
  for (const std::string& p : parts) out += "/" + p;
  return out;
}

std::expected<ScratchPath, std::string> parseScratchPath(std::string_view path) {
  auto refuse = [&](const char* why) { return std::unexpected(std::string(path) + ": " + why); };
  if (path.size() > 4096) return refuse("path longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos) return refuse("path holds a NUL byte");
  if (!path.starts_with('/')) return refuse("not an absolute sandbox path");
  ScratchPath out;
  for (std::size_t start = 1; start <= path.size();) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty()) continue;
    if (part == "." || part == "..") return refuse("'.' and '..' components are refused");
    if (part.size() > 255) return refuse("a component longer than 255 bytes");
    if (out.top.empty())
      out.top = part;
    else
      out.parts.emplace_back(part);
  }
  if (out.top != "work" && out.top != "tmp" && out.top != "output")
    return refuse("only paths under /work, /tmp and /output are allowed");
  return out;
}

base::Result<void> planSandboxFiles(const std::vector<SandboxFile>& files, MountPlan& plan) {
  auto refuse = [](std::string msg) {
    return std::unexpected(base::Error{base::Code::kIo, std::move(msg), "sandbox file"});
  };
  using K = MountOp::Kind;
  std::set<std::string> dirs, written;
  std::vector<MountOp> ops;
  for (const SandboxFile& f : files) {
    auto p = parseScratchPath(f.path);
    if (!p) return refuse(p.error());
    if (p->parts.empty()) return refuse(f.path + ": names a directory of the sandbox, not a file");
    if (f.mode & ~07777u) return refuse(f.path + ": mode must be within 07777");
    // /work, /tmp and /output are binds of the scratch tmpfs's work/, tmp/ and output/.
    std::string at = plan.scratch + "/" + p->top;
    for (std::size_t i = 0; i + 1 < p->parts.size(); ++i) {
      at += "/" + p->parts[i];
      if (written.contains(at)) return refuse(f.path + ": a parent directory is also a file");
      if (!dirs.insert(at).second) continue;
      ops.push_back({K::kMkdir, at, {}, {}, 0755, 0, "mkdir for a sandbox file"});
      ops.push_back({K::kChown, at, {}, {}, 0, 0, "chown a sandbox file's directory"});
    }
    at += "/" + p->parts.back();
    if (dirs.contains(at) || !written.insert(at).second)
      return refuse(f.path + ": given twice, or also a directory of another file");
    ops.push_back({K::kWriteFile, at, {}, f.content, f.mode, 0, "write sandbox file"});
    ops.push_back({K::kChown, at, {}, {}, 0, 0, "chown a sandbox file"});
  }
  for (MountOp& op : ops) plan.ops.push_back(std::move(op));
  return {};
}

}  // namespace sluice::runner::detail
