// `sluice audit ship --db DB --to postgresql://... [--node ID] [--once]`: copies the node's audit
// rows and checkpoints into the central PostgreSQL store, then follows the store (like tail -f)
// until SIGINT/SIGTERM. Resumes from the position kept in the target. Without --node the id is
// derived from /etc/machine-id, else the host name.
// Exit status: 0 shipped (or stopped by a signal); 2 error (nothing of a failed batch is kept).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "audit_db.hpp"
#include "commands.hpp"
#include "sluice/audit/central.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/base/hex.hpp"

namespace sluice::cli {
namespace {

struct ShipArgs {
  std::string db, to, node;
  bool once = false;
  std::size_t batch = 1000;
  int interval_ms = 200;
};

/// The signals that stop a following ship: SIGINT, SIGTERM.
sigset_t stopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

/// Waits up to `timeout` for a stop signal (blocked, so they wait for us); true when one came.
bool waitForStopSignal(std::chrono::milliseconds timeout) {
  const sigset_t set = stopSignals();
  const auto ms = timeout.count();
  const timespec ts{static_cast<std::time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000};
  return ::sigtimedwait(&set, nullptr, &ts) > 0;
}

/// The node id when --node is not given, and where it came from: one derived from
/// /etc/machine-id (stable across reboots and renames), else the host name; empty when neither
/// is there. The machine id itself is confidential (machine-id(5): derive an application-specific
/// id instead of sending it off the machine), so the id is 32 hex digits of an HMAC keyed by it.
std::pair<std::string, std::string> defaultNode() {
  std::ifstream in("/etc/machine-id");
  std::string id;
  if (in && std::getline(in, id)) {
    while (!id.empty() && (id.back() == ' ' || id.back() == '\r')) id.pop_back();
    const std::string_view app[] = {"sluice audit ship node"};
    const std::string mac = id.empty() ? "" : base::hmac(base::HmacDigest::kSha256, id, app);
    if (mac.size() >= 16) return {base::hexEncode(mac.substr(0, 16)), "/etc/machine-id"};
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0')
    return {std::string(host), "the host name"};
  return {};
}

int runShip(ShipArgs a) {
  if (a.node.empty()) {
    // The store records no node id of its own: a stable one of this machine's, said once.
    auto [node, from] = defaultNode();
    if (node.empty()) {
      std::cerr << "sluice audit: ship: --node ID is required (no /etc/machine-id, no host name)\n";
      return 2;
    }
    std::cerr << "sluice audit: ship: node id " << node << " (from " << from
              << "; --node ID to choose)\n";
    a.node = std::move(node);
  }
  const sigset_t stop = stopSignals();
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  warnPasswordInUri(a.to);
  audit::ShipOptions o;
  o.db = a.db;
  o.conninfo = a.to;
  o.node = a.node;
  o.once = a.once;
  o.batch_rows = a.batch;
  o.interval = std::chrono::milliseconds(a.interval_ms);
  o.wait = waitForStopSignal;
  auto result = audit::ship(o);
  if (!result) {
    std::cerr << "sluice audit: ship: " << result.error().message << "\n";
    return 2;
  }
  std::cout << a.db << " -> node " << a.node << ": shipped " << result->rows << " rows and "
            << result->checkpoints << " checkpoints; position seq " << result->seq << "\n";
  return 0;
}

}  // namespace

void addAuditShipCommand(CLI::App& audit_cmd, int& exit_code) {
  auto args = std::make_shared<ShipArgs>();
  CLI::App* ship = audit_cmd.add_subcommand(
      "ship",
      "Copy the store's rows and checkpoints into a central PostgreSQL store, exactly once, "
      "then follow it (resumable from the position kept there)");
  ship->add_option("--db", args->db, "Audit database (the node's store)")->required();
  ship->add_option("--to", args->to, "postgresql://... (a libpq connection URI)")->required();
  ship->add_option(
      "--node", args->node,
      "The node id its rows are kept under (default: derived from /etc/machine-id, else the host "
      "name)");
  ship->add_flag("--once", args->once, "Copy what is there and exit (default: follow)");
  ship->add_option("--batch", args->batch, "Rows per PostgreSQL transaction")
      ->check(CLI::PositiveNumber);
  ship->add_option("--interval-ms", args->interval_ms, "Follow: how often to look for new rows")
      ->check(CLI::PositiveNumber);
  ship->callback([args, &exit_code] { exit_code = runShip(*args); });
}

}  // namespace sluice::cli
