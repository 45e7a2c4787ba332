// The Linux sandbox: runs one command in fresh mount, pid, net, ipc, uts and cgroup namespaces,
// as an unprivileged uid with no capabilities, no_new_privs, a seccomp filter and (where the
// kernel has it) Landlock, under cgroup and rlimit limits, and reports what happened.
// Depends only on plain structs: limits in, RunResult out, plus a listening fd inside the
// sandbox's network namespace handed to the caller (the proxy). See docs/sandbox.md.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/base/error.hpp"

namespace sluice::runner {

/// Effective resource limits of one execution. 0 means "no limit" for the byte/count fields
/// except where noted; durations of 0 mean no limit.
struct Limits {
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};   // wall clock
  std::chrono::milliseconds cpu_time{std::chrono::seconds(20)};  // all processes together
  std::uint64_t memory = 512ull << 20;                           // cgroup, swap included
  std::uint64_t pids = 64;
  std::uint64_t output = 1ull << 20;  // captured per stream; the rest counted and dropped
  std::uint64_t disk = 100ull << 20;  // one tmpfs shared by /work, /tmp and /output
  std::uint64_t file_size = 0;        // RLIMIT_FSIZE; 0 = same as disk
  std::uint64_t open_files = 256;     // RLIMIT_NOFILE
};

/// A host file or directory made visible read-only under /input.
struct Input {
  std::filesystem::path host;
  std::string sandbox;  // path relative to /input (no "..", no leading "/")
};

/// A host path shown read-only (nosuid, nodev) in the sandbox, after its default /etc (a
/// policy's `sandbox.mounts`). The policy loader has checked both paths; the runner refuses a
/// source that is missing or is not its own real path (a symlink on the way).
struct HostMount {
  std::string source;  // absolute host path
  std::string target;  // absolute sandbox path
};

/// A file placed in the sandbox's scratch space before the program starts.
struct SandboxFile {
  std::string path;  // absolute sandbox path under /work, /tmp or /output; no "." or ".." parts
  std::string content;
  unsigned mode = 0644;  // permission bits (at most 07777); owned by the sandbox uid/gid
};

/// Everything the runner needs for one execution.
struct RunSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // K=V added to the fixed environment (see buildEnvironment)
  Limits limits;
  /// true: proxy listeners at 127.0.0.1:3128 and [::1]:3128 in the sandbox, and every other
  /// TCP connection redirected to them (docs/sandbox.md "How traffic leaves").
  bool network_proxy = false;
  std::vector<Input> inputs;
  std::vector<HostMount> mounts;     // read-only host paths (listed in the receipt)
  std::filesystem::path output_dir;  // empty: /output is discarded after the run
  std::string execution_id;          // [A-Za-z0-9._-]+; names the cgroup
  /// Extra files placed in the sandbox, sandbox absolute path -> content (e.g. the proxy's CA
  /// bundle at /etc/ssl/certs/ca-certificates.crt). Only under /etc.
  std::vector<std::pair<std::string, std::string>> extra_files;
  uid_t uid = 65534;
  gid_t gid = 65534;
  /// Fed to the program's stdin through a pipe, then EOF. Empty: stdin is /dev/null.
  std::string stdin_data;
  /// Written into the scratch tmpfs (counted against `disk`) after mounting, before the program
  /// starts; missing parent directories are created, owned by the sandbox uid/gid.
  std::vector<SandboxFile> files;
};

/// Which limit stopped (or, for output/disk/pids, constrained) the program.
enum class LimitHit : std::uint8_t {
  kNone,
  kTimeout,
  kCpu,
  kMemory,
  kPids,
  kOutput,
  kDisk,
  kFileSize
};
/// "timeout", "cpu", ... ; "" for kNone.
std::string_view limitHitName(LimitHit l);

struct Usage {
  std::uint64_t cpu_user_ms = 0;
  std::uint64_t cpu_sys_ms = 0;
  std::uint64_t max_rss_bytes = 0;
  std::uint64_t pids_peak = 0;
};

struct StreamCapture {
  std::uint64_t bytes = 0;  // total written by the program
  bool truncated = false;   // bytes > captured text
  std::string text;         // the first Limits::output bytes
};

struct Artifact {
  std::string path;  // relative to /output
  std::uint64_t bytes = 0;
  std::string sha256;
};

/// Why part of /output was left behind (docs/sandbox.md "Artifacts").
enum class ArtifactSkip : std::uint8_t {
  kDiskBudget,  // the bytes collected would exceed the sandbox's disk limit
  kEntries,     // more than 10,000 entries
  kDepth,       // a directory more than 32 levels below /output
  kName,        // a name with a control character or not valid UTF-8
};
/// "disk_budget", "entries", "depth", "name".
std::string_view artifactSkipName(ArtifactSkip s);

/// Set when not everything under /output was collected. Symlinks and special files are never
/// collected and do not set it.
struct ArtifactsTruncated {
  ArtifactSkip reason = ArtifactSkip::kDiskBudget;  // the first reason met, in walk order
  std::uint64_t skipped = 0;  // entries left behind, all reasons (an unentered directory is 1)
};

/// One regular file of an --input as the receipt lists it (docs/sandbox.md "Inputs"): hashed
/// on a thread of its own while the sandbox starts, so a digest is what was read at run time.
struct InputFile {
  std::string path;    // inside the sandbox: /input/...
  std::string source;  // on the host (the input's symlinks resolved, none followed beneath it)
  std::uint64_t bytes = 0;
  std::string sha256;  // empty when the file could not be read (then `error` says why)
  std::string error;   // strerror of the failure; empty when hashed
};

/// At most this many input files are listed per run (RunResult::inputs_truncated past it).
inline constexpr std::size_t kMaxInputFiles = 10000;

struct Isolation {
  std::vector<std::string> namespaces;  // "mount", "pid", "net", "ipc", "uts", "cgroup"
  bool seccomp = false;
  bool landlock = false;
  bool no_new_privs = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string cgroup;  // "v1" | "v2" | "none" (unprivileged user-namespace mode)
};

struct RunResult {
  int exit_code = 0;  // the program's status when it exited normally
  int signal = 0;     // the signal that killed it, 0 if none
  LimitHit limit_hit = LimitHit::kNone;
  Usage usage;
  StreamCapture out;
  StreamCapture err;
  std::vector<Artifact> artifacts;
  std::optional<ArtifactsTruncated> artifacts_truncated;  // none: all of /output collected
  std::vector<InputFile> inputs;  // every regular file of RunSpec::inputs, sorted by path
  bool inputs_truncated = false;  // more than kMaxInputFiles: the rest are not listed
  Isolation isolation;
  std::chrono::system_clock::time_point started_at;
  std::chrono::system_clock::time_point ended_at;
  /// Where the time went (phase name, microseconds), for `SLUICE_TIMING=1` and benchmarks.
  std::vector<std::pair<std::string, std::int64_t>> phases;
  bool stopped_by_request = false;  // requestStop() or RunHooks::stop_fd stopped the run
  int stop_signal = 0;              // the signal requestStop() named; SIGTERM for stop_fd

  /// The exit status `sluice run` returns for this result (DESIGN.md): 124 when a limit made
  /// the program fail, 128+N for a signal, else the program's own status.
  int sluiceExitStatus() const;
};

/// Why an execution could not be set up or the command not started: a base::Error whose
/// `where` names the failing setup step ("mount /proc", "cgroup memory.max", "execve") and whose
/// code gives the exit status (base::exitStatus): kCommandNotFound (127) and kCannotExecute
/// (126) for a command that could not start, any other code (125) when sluice's setup failed.
/// True when the command itself could not start (exit 126/127), false when setup failed.
bool commandNotStarted(const base::Error& e);

/// `cause` as the failed setup step `where` (exit 125), keeping its message, errno and
/// cause_code (an audit store's SQLite code); a code that means another exit status becomes kIo.
base::Error setupFailure(std::string where, base::Error cause);

/// Called before the program starts with a TCP socket listening inside the sandbox's network
/// namespace: twice, first with 127.0.0.1:3128, then with [::1]:3128 (IPv6 only). Both receive
/// the sandbox's proxy connections, explicit ones and the transparently captured ones (every
/// TCP connection to a non-loopback address is redirected there; SO_ORIGINAL_DST, for IPv6
/// IP6T_SO_ORIGINAL_DST, gives the address the program asked for). Ownership of the fd passes
/// to the callee (the proxy accepts on it from the host namespace). An error aborts the run
/// with an error at "proxy listener". In unprivileged (user-namespace) mode there is no
/// transparent capture and only the IPv4 listener (see docs/sandbox.md "How traffic leaves").
using ListenerCallback = std::function<std::expected<void, std::string>(int fd)>;

/// Called once, before the program starts and after the ListenerCallback calls, with the
/// sockets of the sandbox's DNS server inside its network namespace (the sandbox's
/// /etc/resolv.conf names it): a UDP socket bound to 127.0.0.53:53 and a TCP socket listening
/// there. Ownership of both passes to the callee. Without this hook neither socket exists (and
/// a lookup fails at once: nothing answers on 127.0.0.53). An error aborts the run with a
/// error at "dns sockets".
/// `blocked_log_fd`: an nfnetlink_log socket (NETLINK_NETFILTER) made in the same namespace,
/// bound to log group kBlockedLogGroup, which receives the headers (at most 128 bytes) of
/// every packet the namespace's capture rules reject (UDP other than sluice's DNS, QUIC, ICMP,
/// TCP the redirect did not take), each message with its NFULA_SEQ; ownership passes to the
/// callee, which records them (sluice's proxy: Proxy::adoptBlockedLog, docs/sandbox.md).
using DnsCallback =
    std::function<std::expected<void, std::string>(int udp_fd, int tcp_fd, int blocked_log_fd)>;

/// The nfnetlink_log group of the capture rules' reject rules (in the sandbox's namespace only).
inline constexpr std::uint16_t kBlockedLogGroup = 1;

/// Called once, after the sandbox is built and just before its program may start; an error
/// aborts the run (nothing of the program runs) with that error. `sluice run` waits here
/// for the audit store it opened in the background, so that no program runs unaudited.
using StartGate = std::function<base::Result<void>()>;

/// Called once with the final result (the program and everything it started are gone, the
/// counters read, /output copied) just before the sandbox is torn down, so the caller can
/// overlap its own work (`sluice run` starts its durable audit commit) with the teardown.
using ResultCallback = std::function<void(const RunResult&)>;

/// Receives the program's output live, as it arrives (stream 1 = stdout, 2 = stderr).
using OutputSink = std::function<void(int stream, std::string_view data)>;

/// A sandbox whose namespaces are being built ahead of time; see prepareSandbox().
struct PreparedSandbox;
struct PreparedSandboxDeleter {
  void operator()(PreparedSandbox* p) const;  // kills and reaps the helper if still unused
};
using PreparedSandboxPtr = std::unique_ptr<PreparedSandbox, PreparedSandboxDeleter>;

/// Starts building a sandbox's namespaces now, for a later runSandboxed(). Call it first
/// thing, while the process is single-threaded and has loaded no policy, secret or key: a
/// helper forked from it unshares the mount, network, IPC, UTS and PID namespaces (the
/// costliest part of a run's start) while the caller does its own start-up, and the sandbox's
/// processes, forked from that helper, never hold a copy of what the caller loads later.
/// Called once the process has other threads it prepares nothing and returns null.
/// Without root the helper also unshares a user namespace (runSandboxed() then writes its
/// uid/gid maps before sending the plan). runSandboxed() without one builds everything itself.
base::Result<PreparedSandboxPtr> prepareSandbox();

/// Prepares sandboxes for a long-running, multi-threaded process (`sluice serve`): a small
/// process forked by start() while the caller is still single-threaded and has loaded no
/// policy, secret or key forks each sandbox's namespace helper on request, so that the
/// caller never forks itself for a sandbox. Its pages are then not shared copy-on-write with
/// every sandbox's init (each later write of the caller to such a page would fault), its
/// address space is not copied for each sandbox (with its memory map locked meanwhile), and no
/// sandbox process holds a copy of what the caller loaded later. The helpers and inits are the
/// caller's children (CLONE_PARENT), tied by PR_SET_PDEATHSIG to the thread that called
/// start(), which must therefore outlive every sandbox (the main thread).
class SandboxZygote {
 public:
  /// Forks the zygote. Fails (and forks nothing) once the process has other threads.
  static base::Result<std::unique_ptr<SandboxZygote>> start();
  ~SandboxZygote();  // the zygote exits and is reaped; sandboxes it prepared are unaffected
  SandboxZygote(const SandboxZygote&) = delete;
  SandboxZygote& operator=(const SandboxZygote&) = delete;

  /// A prepared sandbox for runSandboxed() or SandboxSession::start(), as prepareSandbox()
  /// gives, from any thread.
  base::Result<PreparedSandboxPtr> prepare();

 private:
  struct Impl;
  explicit SandboxZygote(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// What a caller hooks into one run. Every member is optional.
struct RunHooks {
  ListenerCallback on_listener{};  // called only when RunSpec::network_proxy (twice: v4, v6)
  DnsCallback on_dns{};            // called only when RunSpec::network_proxy
  OutputSink live{};
  StartGate before_start{};
  ResultCallback on_result{};
  /// When this fd becomes readable (an eventfd or a pipe's read end; never read or closed by
  /// the runner), this run stops as on requestStop(SIGTERM): the sandbox is torn down and the
  /// result has stopped_by_request and stop_signal = SIGTERM. Readable before the program
  /// started: an error at "stopped" (nothing of the program ran). Affects this run only.
  int stop_fd = -1;
};

/// Runs `spec` to completion. Every process of the sandbox is gone, its cgroups removed and
/// nothing left mounted when this returns. As root: full isolation with cgroups. Otherwise a
/// user namespace is used (where the kernel allows it): same namespaces, seccomp, Landlock and
/// rlimits, but no cgroups (isolation.cgroup = "none"; memory not enforced, pids through
/// RLIMIT_NPROC).
///
/// Thread-safe: several threads of one process may run sandboxes at once (each needs its own
/// execution_id, which names its cgroup). The calling thread must outlive the run (init's
/// PR_SET_PDEATHSIG follows the creating thread; it does, since this call blocks until the
/// end). The caller's process must not reap children it did not start (no waitpid(-1), no
/// SIGCHLD set to SIG_IGN). Hooks are called on the calling thread.
base::Result<RunResult> runSandboxed(const RunSpec& spec, const RunHooks& hooks = {},
                                     PreparedSandboxPtr prepared = nullptr);

/// Makes SIGINT and SIGTERM stop every running sandbox of this process (teardown, then
/// RunResult with stopped_by_request) instead of killing sluice outright. Call once from main.
void installStopHandlers();

/// Asks every running runSandboxed() of this process to stop (async-signal-safe). A request
/// made before a run starts stops the next run that starts (`sluice run`'s Ctrl-C during its
/// start-up); to stop one run among several, use RunHooks::stop_fd.
void requestStop(int signal);

/// True when this process can create the fully isolated sandbox (root, namespaces, cgroups).
/// `why` says what is missing otherwise.
bool sandboxSupported(std::string* why = nullptr);

struct GcReport {
  std::vector<std::string> removed_cgroups;
  std::vector<std::string> killed_pids;
  std::vector<std::string> errors;  // what could not be removed, and why
};

/// Removes cgroups left behind by a sluice that was SIGKILLed (killing any process still in
/// them). Only touches cgroups of executions whose sluice process is gone.
std::expected<GcReport, std::string> collectGarbage();

}  // namespace sluice::runner
