// `sluice policy replay` and `sluice policy learn`: recorded traffic (the audit store) against a
// candidate policy, and the tightest policy for what executions did (sluice::replay).
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/replay/learn.hpp"
#include "sluice/replay/replay.hpp"

namespace sluice::cli {
namespace {

struct ReplayOptions {
  std::string db, policy, since;
  std::vector<std::string> executions;
  std::string workflow;
  bool json = false;
};

// The candidate: one workflow, its problems as FILE:LINE:COL lines.
std::shared_ptr<const policy::Workflow> loadCandidate(const std::string& path) {
  auto set = policy::loadPolicyPath(path);
  if (!set) {
    std::cerr << set.error().str();
    return nullptr;
  }
  if (set->workflows.size() != 1) {
    std::cerr << "sluice policy replay: " << path << " holds " << set->workflows.size()
              << " workflows; name one file\n";
    return nullptr;
  }
  return set->workflows.begin()->second;
}

std::expected<replay::Scope, std::string> scopeOf(const ReplayOptions& o) {
  replay::Scope s;
  s.executions = o.executions;
  if (!o.workflow.empty()) s.workflow = o.workflow;
  if (!o.since.empty()) {
    auto t = audit::parseTime(o.since, base::nowMs());
    if (!t) return std::unexpected("--since: " + t.error().message);
    s.since_ms = *t;
  }
  return s;
}

// Exit 0 nothing changes, 1 something does, 2 an error.
int runReplay(const ReplayOptions& o) {
  auto candidate = loadCandidate(o.policy);
  if (!candidate) return 2;
  auto scope = scopeOf(o);
  if (!scope) {
    std::cerr << "sluice policy replay: " << scope.error() << "\n";
    return 2;
  }
  auto history = replay::History::open(o.db);
  if (!history) {
    std::cerr << "sluice policy replay: " << o.db << ": " << history.error().message << "\n";
    return 2;
  }
  if (auto known = history->requireExecutions(o.executions); !known) {
    std::cerr << "sluice policy replay: " << o.db << ": " << known.error().message << "\n";
    return 2;
  }
  auto report = replay::replay(*history, *scope, *policy::Matcher::compile(candidate));
  if (!report) {
    std::cerr << "sluice policy replay: " << report.error().message << "\n";
    return 2;
  }
  std::cout << (o.json ? replay::replayJson(*report, *candidate) : replay::replayText(*report));
  return report->counts.changed() > 0 ? 1 : 0;
}

int runLearn(const std::string& db, const std::vector<std::string>& executions,
             const std::string& name) {
  if (!policy::isWorkflowName(name)) {
    std::cerr << "sluice policy learn: --name '" << name
              << "': a workflow name is [a-z0-9][a-z0-9-]*, at most 63 characters\n";
    return 2;
  }
  auto history = replay::History::open(db);
  if (!history) {
    std::cerr << "sluice policy learn: " << db << ": " << history.error().message << "\n";
    return 2;
  }
  auto yaml = replay::learn(*history, executions, name);
  if (!yaml) {
    std::cerr << "sluice policy learn: " << yaml.error().message << "\n";
    return 2;
  }
  std::cout << *yaml;
  return 0;
}

}  // namespace

void addPolicyHistoryCommands(CLI::App& policy, int& exit_code) {
  auto ro = std::make_shared<ReplayOptions>();
  auto* rep = policy.add_subcommand(
      "replay",
      "Decide recorded traffic again with a candidate policy; exit 0 no change, 1 changes, 2 "
      "error");
  rep->add_option("--db", ro->db, "Audit database")->required();
  rep->add_option("--policy", ro->policy, "Candidate workflow policy file")->required();
  rep->add_option("--execution", ro->executions, "Only these executions (repeatable)");
  rep->add_option("--since", ro->since, "Only rows at or after T (RFC 3339 or 15m, 2h, 7d)");
  rep->add_option("--workflow", ro->workflow, "Only rows of this workflow");
  rep->add_flag("--json", ro->json, "Print one JSON object (schemas/replay.v1.schema.json)");
  rep->callback([&exit_code, ro] { exit_code = runReplay(*ro); });

  auto db = std::make_shared<std::string>();
  auto executions = std::make_shared<std::vector<std::string>>();
  auto name = std::make_shared<std::string>("learned");
  auto* lrn = policy.add_subcommand(
      "learn", "Print the tightest workflow that allows what the executions did");
  lrn->add_option("--db", *db, "Audit database")->required();
  lrn->add_option("--execution", *executions, "Execution id (repeatable)")->required();
  lrn->add_option("--name", *name, "Workflow name (default learned)");
  lrn->callback(
      [&exit_code, db, executions, name] { exit_code = runLearn(*db, *executions, *name); });
}

}  // namespace sluice::cli
