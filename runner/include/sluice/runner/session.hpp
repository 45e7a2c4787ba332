// Session sandboxes: one sandbox whose /work, /tmp and /output persist between the commands run
// in it (execs). Its memory, pids and disk limits and its network (one proxy listener) bound the
// whole session; each exec has its own timeout, output limit, stdin and environment, and when an
// exec's program ends, whatever it left running is killed. The caller's file operations resolve
// paths inside the sandbox and never follow a link out of /work, /tmp and /output.
// See docs/sandbox.md ("Sessions").
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner {

struct SessionSpec {
  std::string session_id{};  // [A-Za-z0-9._-]{1,128}; names the session's cgroup
  /// Session-wide: memory, pids, disk. Per exec: timeout (unless ExecSpec::timeout), cpu_time,
  /// output, file_size, open_files.
  Limits limits{};
  bool network_proxy = false;
  std::vector<Input> inputs{};
  std::vector<HostMount> mounts{};                                 // as RunSpec
  std::vector<std::pair<std::string, std::string>> extra_files{};  // as RunSpec (/etc only)
  std::vector<std::string> env{};                                  // base environment, K=V
  uid_t uid = 65534;
  gid_t gid = 65534;
};

struct ExecSpec {
  std::vector<std::string> argv{};
  /// K=V added to the session's environment; a name the session's `env` also sets replaces it
  /// for this exec (the fixed variables of buildEnvironment cannot be replaced).
  std::vector<std::string> env{};
  std::string cwd = "/work";                           // absolute; entered as the sandbox user
  std::string stdin_data{};                            // as RunSpec::stdin_data
  std::optional<std::chrono::milliseconds> timeout{};  // default: the session's limits.timeout
  std::string execution_id{};  // for the caller's receipt; [A-Za-z0-9._-]{1,128} or empty
};

struct ExecHooks {
  OutputSink live{};
  int stop_fd = -1;  // as RunHooks::stop_fd: stops this exec only (the session stays)
};

struct FileInfo {
  std::string path{};  // sandbox path, e.g. "/work/data.csv"
  std::uint64_t bytes = 0;
  std::string sha256{};  // writeFile() only (listDir() leaves it empty)
  bool directory = false;
};

/// One session sandbox. Thread-safe: exec() calls are serialised (one program at a time); the
/// file operations, artifacts() and usage() may run concurrently with an exec and each other.
class SandboxSession {
 public:
  /// Builds the sandbox (namespaces, mounts, cgroup, transparent capture, the proxy listeners
  /// through `on_listener` and the DNS sockets through `on_dns`, both called on a thread of
  /// the session's own, as RunHooks' are) and leaves it idle. The session's init is started
  /// from a thread the session owns until end(), so the calling thread may exit.
  /// With `prepared` (SandboxZygote::prepare()) its helper's namespaces are used.
  static base::Result<std::unique_ptr<SandboxSession>> start(
      const SessionSpec& spec, const ListenerCallback& on_listener = {},
      const DnsCallback& on_dns = {}, PreparedSandboxPtr prepared = nullptr);
  ~SandboxSession();  // end()
  SandboxSession(const SandboxSession&) = delete;
  SandboxSession& operator=(const SandboxSession&) = delete;

  /// Runs one command in the session and waits for it (and everything it started) to end.
  /// The result is as runSandboxed()'s, except: usage and limit_hit count this exec only, the
  /// session-wide limits (memory, pids, disk) are the session's, and artifacts stay empty (see
  /// artifacts()). Errors: as runSandboxed()'s, and step "session" once the session ended (by
  /// end(), or because its init died, e.g. killed by the OOM killer).
  base::Result<RunResult> exec(const ExecSpec& spec, const ExecHooks& hooks = {});

  /// Paths are sandbox paths under /work, /tmp or /output only (no "." or ".." components),
  /// resolved inside the sandbox: symlinks in the directories leading to the file are followed
  /// within the sandbox's root (never a /proc magic link), the directory reached must be in the
  /// scratch space, and the file itself is never a symlink. Only regular files are read or
  /// written (fifos and devices are refused without blocking). Errors are "PATH: reason".
  /// writeFile creates or replaces the file (missing directories are made), owned by the
  /// sandbox uid/gid (new files 0644), and returns its size and SHA-256.
  std::expected<FileInfo, std::string> writeFile(const std::string& path, std::string_view data);
  /// As writeFile, with the content read from `from` (to its end) in chunks, never whole in
  /// memory (the daemon's spooled uploads).
  std::expected<FileInfo, std::string> writeFileFrom(const std::string& path, int from);
  /// The whole file; an error if it is larger than `max_bytes`.
  std::expected<std::string, std::string> readFile(const std::string& path,
                                                   std::uint64_t max_bytes);
  /// Regular files and directories directly in the directory `path`, sorted by name (at most
  /// 10,000; names that are not printable UTF-8 are left out). "PATH: Not a directory" for a
  /// file.
  std::expected<std::vector<FileInfo>, std::string> listDir(const std::string& path);
  /// What /output holds now, with SHA-256 (the bounds of docs/sandbox.md "Artifacts").
  std::vector<Artifact> artifacts();
  /// Totals over the session's execs so far (peaks: the highest).
  Usage usage() const;
  const std::string& id() const;
  /// Kills everything in the session, unmounts it and removes its cgroup. Idempotent; a
  /// running exec returns at once (with an error).
  void end();

 private:
  struct State;
  explicit SandboxSession(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace sluice::runner
