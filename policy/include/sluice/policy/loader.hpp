// Loading policy: YAML text -> validated Workflow, or every problem with FILE:LINE:COL.
#pragma once

#include <expected>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/policy/diagnostics.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// A valid workflow name: [a-z0-9][a-z0-9-]{0,62}.
bool isWorkflowName(std::string_view s);

/// Parses and validates one workflow from text; `file` names it in diagnostics.
std::expected<Workflow, LoadError> parseWorkflow(std::string_view yaml, std::string_view file);

/// Reads and parses one workflow file.
std::expected<Workflow, LoadError> loadWorkflowFile(const std::filesystem::path& path);

/// All workflows of a policy directory (every `*.yaml` / `*.yml`, not recursive), by name.
/// Any problem in any file fails the whole load: nothing half-loaded is ever used.
struct PolicySet {
  std::map<std::string, std::shared_ptr<const Workflow>> workflows;
  const Workflow* find(std::string_view name) const;
  /// The message for a workflow name not in this set, naming the ones it has:
  /// `--workflow NAME: no such workflow in DIR (it has: a, b)`.
  std::string unknownWorkflow(std::string_view name, std::string_view dir) const;
};
std::expected<PolicySet, LoadError> loadPolicyDir(const std::filesystem::path& dir);

/// A file or a directory, as `sluice policy check` accepts.
std::expected<PolicySet, LoadError> loadPolicyPath(const std::filesystem::path& path);

}  // namespace sluice::policy
