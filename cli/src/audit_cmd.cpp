// Placeholder until its issue lands: registers nothing yet.
#include "commands.hpp"

namespace sluice::cli {
void addAuditCommands(CLI::App& /*app*/, int& /*exit_code*/) {}
}  // namespace sluice::cli
