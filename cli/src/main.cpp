// Entry point of the `sluice` binary.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "sluice: run generated code in a sandbox whose only way out is a policy-checked proxy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  int exit_code = 0;
  // Only the named command group is built: declaring every option of every command costs
  // ~0.2 ms, a measurable part of a short `sluice run`. Anything else (--help, --version, a
  // typo) gets them all, so help and "did you mean" see every command.
  using Adder = void (*)(CLI::App&, int&);
  struct Group {
    std::initializer_list<std::string_view> names;
    Adder add;
  };
  const Group groups[] = {{{"policy"}, sluice::cli::addPolicyCommands},
                          {{"audit"}, sluice::cli::addAuditCommands},
                          {{"proxy"}, sluice::cli::addProxyCommands},
                          {{"run", "gc"}, sluice::cli::addRunCommands},
                          {{"ca"}, sluice::cli::addCaCommands}};
  const std::string_view first = argc > 1 ? argv[1] : "";
  bool added = false;
  for (const Group& g : groups) {
    if (std::find(g.names.begin(), g.names.end(), first) != g.names.end()) {
      g.add(app, exit_code);
      added = true;
    }
  }
  if (!added)
    for (const Group& g : groups) g.add(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, like grep and the policy tools' "error" status.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
