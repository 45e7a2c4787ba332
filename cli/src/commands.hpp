// Subcommand registration: each file adds its subcommands to the app; a callback stores the
// process exit status in `exit_code` (0 ok; see DESIGN.md for each command's statuses).
#pragma once

namespace CLI {
class App;
}

namespace sluice::cli {

void addPolicyCommands(CLI::App& app, int& exit_code);
void addAuditCommands(CLI::App& app, int& exit_code);
void addProxyCommands(CLI::App& app, int& exit_code);
void addRunCommands(CLI::App& app, int& exit_code);  // run, gc
void addCaCommands(CLI::App& app, int& exit_code);   // ca init

}  // namespace sluice::cli
