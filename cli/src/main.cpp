// Entry point of the `sluice` binary.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "sluice/policy/diagnostics.hpp"

namespace {

// `sluice bogus`: CLI11 would only say "A subcommand is required". Names the nearest commands
// (or all of them when none is near) and returns the usage status, 2.
int unknownCommand(std::string_view word, const std::vector<std::string_view>& commands) {
  auto near = sluice::policy::nearestNames(word, commands);
  std::string list;
  for (std::string_view c : near.empty() ? commands : std::vector<std::string_view>()) {
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  for (const auto& c : near) list += (list.empty() ? "'" : ", '") + c + "'";
  std::cerr << "sluice: unknown command '" << word << "' ("
            << (near.empty() ? "commands: " + list : "did you mean " + list + "?")
            << "); see sluice --help\n";
  return 2;
}

}  // namespace

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
  const std::string_view first = argc > 1 ? argv[1] : "";
  // `sluice run [OPTIONS] -- CMD [ARGS...]`: everything after the first `--` is the command,
  // verbatim. CLI11 2.1 lets a repeatable option before `--` (--env A=1 -- sh -c ...) end at
  // the `--` and then parses the command's own flags (-c) as sluice's, so the command is cut
  // off here, before CLI11 sees it.
  std::optional<std::vector<std::string>> trailing;
  int parsed_argc = argc;
  if (first == "run") {
    for (int i = 2; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--") {
        trailing.emplace(argv + i + 1, argv + argc);
        parsed_argc = i;
        break;
      }
    }
  }
  static std::optional<std::vector<std::string>> run_trailing;
  run_trailing = trailing;
  const Group groups[] = {
      {{"policy"}, sluice::cli::addPolicyCommands},
      {{"audit"}, sluice::cli::addAuditCommands},
      {{"proxy"}, sluice::cli::addProxyCommands},
      {{"run", "gc"},
       [](CLI::App& a, int& rc) { sluice::cli::addRunCommands(a, rc, run_trailing); }},
      {{"ca"}, sluice::cli::addCaCommands},
      {{"serve"}, sluice::cli::addServeCommands},
      {{"mcp"}, sluice::cli::addMcpCommands},
      {{"approvals"}, sluice::cli::addApprovalsCommands},
      {{"session"}, sluice::cli::addSessionCommands}};
  std::vector<std::string_view> commands;
  for (const Group& g : groups) commands.insert(commands.end(), g.names.begin(), g.names.end());
  if (!first.empty() && first.front() != '-' &&
      std::find(commands.begin(), commands.end(), first) == commands.end()) {
    return unknownCommand(first, commands);
  }
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
    app.parse(parsed_argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, like grep and the policy tools' "error" status.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
