// Encoding of ChildPlan for prepared sandboxes; see plan_codec.hpp.
#include "plan_codec.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace sluice::runner::detail {
namespace {

static_assert(std::is_trivially_copyable_v<PrivilegePlan>);
static_assert(std::is_trivially_copyable_v<sock_filter>);
static_assert(std::is_trivially_copyable_v<ChildFds>);

class Writer {
 public:
  void u64(std::uint64_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    out_.append(s);
  }
  void strings(const std::vector<std::string>& v) {
    u64(v.size());
    for (const auto& s : v) str(s);
  }
  void bytes(const void* p, std::size_t n) {
    if (n > 0) out_.append(static_cast<const char*>(p), n);  // p may be null when n is 0
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool u64(std::uint64_t& v) { return bytes(&v, sizeof v); }
  bool str(std::string& s) {
    std::uint64_t n = 0;
    if (!u64(n) || n > in_.size()) return false;
    s.assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  bool strings(std::vector<std::string>& v) {
    std::uint64_t n = 0;
    if (!u64(n) || n > in_.size()) return false;
    v.resize(n);
    for (auto& s : v)
      if (!str(s)) return false;
    return true;
  }
  bool bytes(void* p, std::size_t n) {
    if (n > in_.size()) return false;
    if (n == 0) return true;  // p may be null (an empty vector's data())
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace

std::string encodePlan(const ChildPlan& plan) {
  Writer w;
  w.str(plan.mounts.stage);
  w.str(plan.mounts.new_root);
  w.str(plan.mounts.scratch);
  w.u64(plan.mounts.ops.size());
  for (const MountOp& op : plan.mounts.ops) {
    w.u64(static_cast<std::uint64_t>(op.kind));
    w.str(op.path);
    w.str(op.source);
    w.str(op.content);
    w.u64(op.mode);
    w.u64(static_cast<std::uint64_t>(op.dev));
    w.u64(reinterpret_cast<std::uintptr_t>(op.step));  // static text: same address in the fork
    w.u64(op.keep_flags);
  }
  w.bytes(&plan.privileges, sizeof plan.privileges);
  w.u64(plan.seccomp.size());
  w.bytes(plan.seccomp.data(), plan.seccomp.size() * sizeof(sock_filter));
  w.strings(plan.argv_storage);
  w.strings(plan.env_storage);
  w.strings(plan.path_dirs);
  w.u64(plan.network_proxy ? 1 : 0);
  w.u64(plan.stdin_pipe ? 1 : 0);
  w.u64(plan.session ? 1 : 0);
  w.u64(plan.user_namespace ? 1 : 0);
  w.u64(reinterpret_cast<std::uintptr_t>(plan.arg_start));  // sluice's argv: same in the fork
  w.u64(plan.arg_len);
  w.bytes(&plan.fds, sizeof plan.fds);
  return w.take();
}

std::expected<void, std::string> decodePlan(std::string_view bytes, ChildPlan& plan) {
  Reader r(bytes);
  auto bad = [](const char* what) {
    return std::unexpected(std::string("malformed plan: ") + what);
  };
  std::uint64_t n = 0;
  if (!r.str(plan.mounts.stage) || !r.str(plan.mounts.new_root) || !r.str(plan.mounts.scratch) ||
      !r.u64(n))
    return bad("mount plan");
  plan.mounts.ops.clear();
  for (std::uint64_t i = 0; i < n; ++i) {
    MountOp op{};
    std::uint64_t kind = 0, mode = 0, dev = 0, step = 0, keep = 0;
    if (!r.u64(kind) || !r.str(op.path) || !r.str(op.source) || !r.str(op.content) ||
        !r.u64(mode) || !r.u64(dev) || !r.u64(step) || !r.u64(keep) ||
        kind > static_cast<std::uint64_t>(MountOp::Kind::kChown))
      return bad("mount op");
    op.kind = static_cast<MountOp::Kind>(kind);
    op.mode = static_cast<unsigned>(mode);
    op.dev = static_cast<dev_t>(dev);
    op.step = reinterpret_cast<const char*>(static_cast<std::uintptr_t>(step));
    op.keep_flags = static_cast<unsigned long>(keep);
    plan.mounts.ops.push_back(std::move(op));
  }
  if (!r.bytes(&plan.privileges, sizeof plan.privileges) || !r.u64(n) ||
      n > bytes.size() / sizeof(sock_filter))
    return bad("privileges");
  plan.seccomp.resize(n);
  if (!r.bytes(plan.seccomp.data(), n * sizeof(sock_filter))) return bad("seccomp");
  std::uint64_t proxy = 0, stdin_pipe = 0, session = 0, userns = 0, arg_start = 0, arg_len = 0;
  if (!r.strings(plan.argv_storage) || !r.strings(plan.env_storage) || !r.strings(plan.path_dirs) ||
      !r.u64(proxy) || !r.u64(stdin_pipe) || !r.u64(session) || !r.u64(userns) ||
      !r.u64(arg_start) || !r.u64(arg_len) || !r.bytes(&plan.fds, sizeof plan.fds) || !r.done())
    return bad("program");
  plan.network_proxy = proxy != 0;
  plan.stdin_pipe = stdin_pipe != 0;
  plan.session = session != 0;
  plan.user_namespace = userns != 0;
  plan.arg_start = reinterpret_cast<char*>(static_cast<std::uintptr_t>(arg_start));
  plan.arg_len = static_cast<std::size_t>(arg_len);
  plan.argv.clear();
  plan.envp.clear();
  for (std::string& s : plan.argv_storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  for (std::string& s : plan.env_storage) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  return {};
}

}  // namespace sluice::runner::detail
