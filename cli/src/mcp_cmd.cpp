// `sluice mcp`: a Model Context Protocol tool server on stdin/stdout (serve/; docs/mcp.md).
// stdout carries the protocol only: the process's own fd 1 is pointed at stderr before any
// thread starts, so a stray write (a log line, a library's printf) cannot corrupt a message.
// SIGTERM/SIGINT stop the running tool call and end the session with its receipt; closing
// stdin ends it after the calls already sent.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "commands.hpp"
#include "sluice/base/log.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/serve/mcp.hpp"

namespace sluice::cli {
namespace {

// The protocol's own descriptors, and 0/1 pointed elsewhere: stdin at /dev/null (a sandbox or
// helper never reads the client's messages), stdout at stderr.
struct ProtocolFds {
  int in = -1, out = -1;
};

std::expected<ProtocolFds, std::string> takeStdio() {
  ProtocolFds fds;
  fds.in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  fds.out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fds.in < 0 || fds.out < 0 || devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(2, 1) < 0)
    return std::unexpected(std::string("cannot set up stdin/stdout"));
  ::close(devnull);
  return fds;
}

// Where sluice's own log lines go under `sluice mcp`. The agent shows the server's stderr to
// its user or model, so by default there are none: --log-file sends them to a file (level
// info unless --log-level says otherwise), --log-level alone to stderr.
struct McpLogging {
  std::string file;
  std::string level;
};

int setUpLogging(const McpLogging& log) {
  // stdout is the protocol: spdlog's default logger (stdout) becomes base's "mcp".
  base::logger(base::LoggerId::kMcp);
  spdlog::set_default_logger(spdlog::get(std::string(base::loggerName(base::LoggerId::kMcp))));
  if (!log.file.empty()) {
    if (auto r = base::setLogFile(log.file); !r) {
      std::fprintf(stderr, "sluice mcp: --log-file %s: %s\n", log.file.c_str(),
                   r.error().message.c_str());
      return 2;
    }
  }
  const std::string level = !log.level.empty() ? log.level : log.file.empty() ? "off" : "info";
  if (auto r = base::setLogLevel(level); !r) {
    std::fprintf(stderr, "sluice mcp: --log-level: %s\n", r.error().message.c_str());
    return 2;
  }
  return 0;
}

int runMcp(serve::McpOptions& options, const McpLogging& log) {
  sigset_t set = blockDaemonSignals();
  if (int rc = setUpLogging(log); rc != 0) return rc;
  auto fds = takeStdio();
  if (!fds) {
    std::fprintf(stderr, "sluice mcp: %s\n", fds.error().c_str());
    return 1;
  }
  // While single-threaded and holding no policy, secret or key, as for `sluice serve`.
  options.serve.zygote = startZygote("mcp");
  if (!options.serve.zygote) return 1;
  auto server = serve::McpServer::create(options);
  if (!server) {
    std::fprintf(stderr, "sluice mcp: %s\n", server.error().c_str());
    return 1;
  }
  serve::McpServer* s = server->get();
  // SIGTERM/SIGINT stop the server; SIGHUP is ignored (the session keeps its policy). When
  // serving ends on its own (EOF), the thread is woken with a SIGTERM of its own (pending for
  // it alone: every thread blocks the set) and leaves without touching the server.
  std::atomic<bool> served{false};
  std::thread signals([set, s, &served] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0 || sig == SIGHUP) continue;
      if (served) return;
      spdlog::info("signal {}: stopping", sig);
      s->stop();
      return;
    }
  });
  s->serve(fds->in, fds->out);
  served = true;
  ::pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  return 0;
}

}  // namespace

void addMcpCommands(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<serve::McpOptions>();
  auto log = std::make_shared<McpLogging>();
  auto* cmd = app.add_subcommand(
      "mcp", "Serve MCP tools on stdio: one sandbox session per connection (docs/mcp.md)");
  cmd->add_option("--policy-dir", o->serve.policy_dir, "Directory of workflow policy files")
      ->required();
  cmd->add_option("--workflow", o->workflow, "The workflow the tools run under")->required();
  cmd->add_option("--signing-key", o->serve.signing_key,
                  "Sign audit checkpoints with this Ed25519 key (sluice audit keygen; 0600)");
  cmd->add_option("--audit", o->serve.audit_db,
                  "Audit database (default /var/lib/sluice/audit.db)");
  cmd->add_option("--secrets", o->serve.secrets, "Secret store file (mode 0600)");
  cmd->add_option("--ca-dir", o->serve.ca_dir,
                  "CA directory for tls: inspect rules (sluice ca init)");
  cmd->add_option("--upstream-ca", o->serve.upstream_cas, "Extra CA file for inspected upstreams");
  cmd->add_option("--approve-with", o->approve_with,
                  "Command that answers approvals (gets the approval JSON on stdin, prints allow "
                  "or deny)");
  cmd->add_option("--log-file", log->file,
                  "Write sluice's log lines to this file (created 0600); default: none at all");
  cmd->add_option("--log-level", log->level,
                  "trace, debug, info, warn, error, critical or off (default: off, or info with "
                  "--log-file)");
  cmd->callback([o, log, &exit_code] { exit_code = runMcp(*o, *log); });
}

}  // namespace sluice::cli
