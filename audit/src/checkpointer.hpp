// The signer of checkpoints: keeps the Merkle tree over the chain and signs checkpoints on a
// thread of its own, so the writer thread only hands over each committed row's hash (hashing
// the tree in the writer cost 5-15% of its throughput; see docs/audit.md "Audit signing").
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "merkle.hpp"
#include "sluice/base/loop.hpp"

namespace sluice::audit {
class PublicKey;
class SigningKey;
}  // namespace sluice::audit

namespace sluice::audit::detail {

/// One signed checkpoints row, ready to insert.
struct CheckpointRow {
  std::int64_t position = 0;
  std::string root, signature, key_id;
  std::int64_t ts = 0;
  std::string frontier;
};

/// The newest checkpoints row of a database, as stored (nothing about it is trusted yet).
struct StoredCheckpoint {
  std::int64_t seq = 0, position = 0, ts = 0;
  std::string root, signature, key_id, frontier;
};

/// The tree a signing store may extend from `c`: only a checkpoint signed by the store's own key
/// (`own`), whose signature verifies and whose frontier folds to the signed root. The frontier
/// is then the one the signer built: another with the same root would be a SHA-256 collision.
/// Otherwise why not ("is signed by key X, not this store's key Y", ...).
std::expected<MerkleFrontier, std::string> resumableTree(const StoredCheckpoint& c,
                                                         const PublicKey& own);

class Checkpointer {
 public:
  /// The thread hashes in batches: it is woken by the first hashes after a drain, then gathers
  /// for up to kGather (or until kBatch hashes wait) before it takes them.
  static constexpr std::size_t kBatch = 4096;
  static constexpr std::chrono::milliseconds kGather{20};

  /// `emit` receives each checkpoint that falls due (every `every_rows` rows, or `interval`
  /// after the last one while rows are unsigned), on the checkpointer's thread.
  Checkpointer(std::shared_ptr<const SigningKey> key, std::size_t every_rows,
               std::chrono::milliseconds interval, MerkleFrontier tree, std::int64_t last_position,
               std::function<void(CheckpointRow)> emit);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  /// Appends committed rows' hashes, in chain order.
  void add(std::vector<Digest>& row_hashes);
  /// Stops the thread once every row handed over is in the tree; returns the checkpoints not
  /// yet emitted, the last one covering every row (none if all rows are already signed).
  std::vector<CheckpointRow> finish();

 private:
  using Clock = base::BackgroundLoop::Clock;
  /// The loop's tick: hashes the rows due, signs what is due; returns when it is next due.
  Clock::time_point tick();
  /// Appends rows to the tree, signing every `every_rows_` rows.
  void append(const std::vector<Digest>& row_hashes);
  CheckpointRow sign();
  /// To emit_, or kept for finish() once the writer is closing.
  void deliver(CheckpointRow row);

  std::shared_ptr<const SigningKey> key_;
  std::size_t every_rows_;
  std::chrono::milliseconds interval_;
  std::function<void(CheckpointRow)> emit_;
  // The loop's thread only (and finish() after the loop stopped).
  MerkleFrontier tree_;
  std::int64_t last_position_ = 0;
  Clock::time_point last_time_ = Clock::now();
  std::vector<Digest> work_;

  std::mutex mu_;
  std::vector<Digest> pending_;           // guarded by mu_
  Clock::time_point pending_since_;       // guarded by mu_: when pending_ became non-empty
  bool stopping_ = false;                 // guarded by mu_
  std::vector<CheckpointRow> collected_;  // guarded by mu_
  // Last: stopped (joined) before the members it uses go.
  base::BackgroundLoop loop_{"sluice-audit-ck"};
};

}  // namespace sluice::audit::detail
