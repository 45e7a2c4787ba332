// Subcommand registration: each file adds its subcommands to the app; a callback stores the
// process exit status in `exit_code` (0 ok; see DESIGN.md for each command's statuses).
#pragma once

#include <signal.h>

#include <chrono>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}
namespace sluice::runner {
class SandboxZygote;
}

namespace sluice::cli {

/// For the long-running commands (proxy, serve): blocks SIGHUP, SIGTERM and SIGINT before any
/// thread starts, so every thread inherits the mask and only the caller's sigwait() sees them,
/// and ignores SIGPIPE (a peer that went away is an EPIPE, not a death). Returns the set.
sigset_t blockDaemonSignals();

/// For the commands that build sandboxes for as long as they run (serve, mcp): the zygote
/// every sandbox comes from (runner/sandbox.hpp SandboxZygote), started while the process is
/// still single-threaded and holds no policy, secret or key. Null, with the error printed as
/// "sluice COMMAND: step: message", when it cannot start.
std::shared_ptr<runner::SandboxZygote> startZygote(const char* command);

/// The gid of group `name` (`--audit-group`), or an error naming it.
std::expected<int, std::string> groupId(const std::string& name);

void addPolicyCommands(CLI::App& app, int& exit_code);
/// policy replay, policy learn (under `policy`).
void addPolicyHistoryCommands(CLI::App& policy, int& exit_code);
void addAuditCommands(CLI::App& app, int& exit_code);
void addProxyCommands(CLI::App& app, int& exit_code);
/// run, gc. `trailing` holds every argument after the first `--` of the command line (main()
/// takes them out before CLI11 parses the rest): they are the command, always, whatever option
/// came before the `--`.
void addRunCommands(CLI::App& app, int& exit_code,
                    std::optional<std::vector<std::string>> trailing = std::nullopt);
void addServeCommands(CLI::App& app, int& exit_code);      // serve
void addCaCommands(CLI::App& app, int& exit_code);         // ca init
void addMcpCommands(CLI::App& app, int& exit_code);        // mcp
void addApprovalsCommands(CLI::App& app, int& exit_code);  // approvals list|allow|deny
void addSessionCommands(CLI::App& app, int& exit_code);    // session policy

/// One request to a running `sluice serve` at `connect` (unix:PATH, or http://HOST:PORT with a
/// bearer `token`, else $SLUICE_TOKEN): its status and body, or why it could not be asked.
struct ServeReply {
  unsigned status = 0;
  std::string body;
};
/// --otlp-endpoint, --otlp-ca and --otlp-interval on `cmd` (sluice proxy, sluice serve).
void addOtlpOptions(CLI::App& cmd, std::string& endpoint, std::string& ca, std::string& interval);
/// --otlp-interval's value: a duration of at least 1s, or the message saying why not.
std::expected<std::chrono::milliseconds, std::string> parseOtlpInterval(const std::string& text);

std::expected<ServeReply, std::string> callServe(
    const std::string& connect, const std::string& token, const std::string& method,
    const std::string& target, const std::string& content_type, const std::string& body);

}  // namespace sluice::cli
