// The central audit store in PostgreSQL (docs/audit.md, "Central audit in PostgreSQL"):
// `sluice audit ship` copies a node's chained rows and checkpoints into it, exactly once, and
// `sluice audit verify --db 'postgresql://...?node=N'` verifies that node's chain there.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/audit/evidence.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/base/error.hpp"

namespace sluice::audit {

/// True when `db` names a PostgreSQL database (postgresql:// or postgres://).
bool isPostgresUri(std::string_view db);

/// True when the connection string holds a password (user:PASSWORD@, password= or
/// sslpassword=): what error messages redact.
bool conninfoHoldsSecret(std::string_view conninfo);

/// A node's rows in the central store: the libpq connection URI without the `node` parameter,
/// and the node id.
struct CentralTarget {
  std::string conninfo;
  std::string node;
};
/// Splits `postgresql://...?node=N&...` into the libpq URI and N (kInvalidArgument without one,
/// unless `node_required` is false).
std::expected<CentralTarget, base::Error> parseCentralUri(std::string_view uri,
                                                          bool node_required = true);

/// Where a ship stands after a batch.
struct ShipProgress {
  std::int64_t seq = 0;           // last chained seq shipped (the target's position)
  std::uint64_t rows = 0;         // rows this run shipped
  std::uint64_t checkpoints = 0;  // checkpoints this run shipped
};

struct ShipOptions {
  std::filesystem::path db;  // the node's SQLite store
  std::string conninfo;      // libpq connection string or URI
  std::string node;          // the node id its rows are kept under
  std::size_t batch_rows = 1000;
  bool once = false;  // copy what is there and return; else follow until stop()
  std::chrono::milliseconds interval{200};  // follow: how often to look for new rows
  /// Follow: asked before each wait; true ends the ship.
  std::function<bool()> stop;
  /// Called after each committed batch.
  std::function<void(const ShipProgress&)> on_batch;
  /// Waits up to `interval` (follow, nothing new); default: sleeps. Returning true stops.
  std::function<bool(std::chrono::milliseconds)> wait;
};

/// Creates the central schema when missing, then ships batches from the target's position:
/// each batch's rows, the checkpoints they complete and the new position in one PostgreSQL
/// transaction. Refuses a store whose chain does not continue the shipped one.
std::expected<ShipProgress, base::Error> ship(const ShipOptions& options);

/// `verify` (store.hpp) over the node's rows in the central store; the head is the node's
/// shipped position.
std::expected<VerifyResult, base::Error> verifyCentral(const CentralTarget& target,
                                                       const VerifyOptions& options);

/// `sluice audit prove` (evidence.hpp, proveExecution) against the node's rows and
/// checkpoints in the central store: the same proof as from the node's own store.
std::expected<std::string, base::Error> proveCentral(const CentralTarget& target,
                                                     std::string_view execution_id);

/// `sluice audit export` (evidence.hpp, exportChain) of the node's rows and checkpoints in the
/// central store: the same lines as from the node's own store.
std::expected<ExportStats, base::Error> exportCentral(const CentralTarget& target,
                                                      const ExportOptions& options,
                                                      std::ostream& out);

/// `sluice audit query|show|sql` against one node's rows in the central store (`target.node`;
/// `sql` reads every node's): the SQLite reader's queries and output, in one READ ONLY
/// REPEATABLE READ transaction.
std::expected<std::unique_ptr<Reader>, base::Error> openCentralReader(const CentralTarget& target);

}  // namespace sluice::audit
