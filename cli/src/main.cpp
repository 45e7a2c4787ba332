// Entry point of the `sluice` binary.
#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"sluice: run generated code in a sandbox whose only way out is a policy-checked proxy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  int exit_code = 0;
  sluice::cli::addPolicyCommands(app, exit_code);
  sluice::cli::addAuditCommands(app, exit_code);
  sluice::cli::addProxyCommands(app, exit_code);
  sluice::cli::addRunCommands(app, exit_code);
  sluice::cli::addCaCommands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, like grep and the policy tools' "error" status.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
