// The checkpoint signer's thread; see checkpointer.hpp.
#include "checkpointer.hpp"

#include <algorithm>

#include "sluice/audit/signing.hpp"
#include "sluice/base/clock.hpp"

namespace sluice::audit::detail {

std::expected<MerkleFrontier, std::string> resumableTree(const StoredCheckpoint& c,
                                                         const PublicKey& own) {
  if (c.position < 1) return std::unexpected("covers no rows");
  if (c.key_id != own.keyId()) {
    return std::unexpected(c.key_id.empty() && c.signature.empty()
                               ? std::string("is not signed")
                               : "is signed by key " + c.key_id + ", not by this store's key " +
                                     own.keyId());
  }
  auto sig = base64Decode(c.signature);
  if (!sig || !own.verify(checkpointSignedText(c.position, c.root, c.ts), *sig))
    return std::unexpected("carries a signature that does not verify (forged or altered)");
  auto tree = MerkleFrontier::parse(static_cast<std::uint64_t>(c.position), c.frontier);
  if (!tree || toHex(tree->root()) != c.root)
    return std::unexpected("has a frontier that does not fold to its signed root");
  return std::move(*tree);
}

Checkpointer::Checkpointer(std::shared_ptr<const SigningKey> key, std::size_t every_rows,
                           std::chrono::milliseconds interval, MerkleFrontier tree,
                           std::int64_t last_position, std::function<void(CheckpointRow)> emit)
    : key_(std::move(key)),
      every_rows_(std::max<std::size_t>(every_rows, 1)),
      interval_(interval),
      emit_(std::move(emit)),
      tree_(std::move(tree)),
      last_position_(last_position) {
  loop_.startScheduled([this] { return tick(); });
}

Checkpointer::~Checkpointer() {
  if (loop_.running()) (void)finish();
}

void Checkpointer::add(std::vector<Digest>& row_hashes) {
  if (row_hashes.empty()) return;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    // Woken by the first hashes after a drain (it then gathers for kGather) or by a full batch:
    // not by every small commit, whose wake-up would compete with the committer on 2 cores.
    wake = pending_.empty() || pending_.size() + row_hashes.size() >= kBatch;
    if (pending_.empty()) {
      pending_since_ = Clock::now();
      pending_.swap(row_hashes);
    } else {
      pending_.insert(pending_.end(), row_hashes.begin(), row_hashes.end());
    }
  }
  row_hashes.clear();
  if (wake) loop_.wake();
}

CheckpointRow Checkpointer::sign() {
  CheckpointRow row;
  row.position = static_cast<std::int64_t>(tree_.size());
  row.root = toHex(tree_.root());
  row.ts = base::nowMs();
  row.signature = base64Encode(key_->sign(checkpointSignedText(row.position, row.root, row.ts)));
  row.key_id = key_->keyId();
  row.frontier = tree_.serialize();
  last_position_ = row.position;
  last_time_ = Clock::now();
  return row;
}

Checkpointer::Clock::time_point Checkpointer::tick() {
  const auto now = Clock::now();
  bool idle = false;  // no hashes waiting after this tick
  Clock::time_point gathered{};
  {
    std::lock_guard lock(mu_);
    // Gather what the next commits bring (they do not wake us) before hashing: one wake-up per
    // kGather under a stream of small durable commits instead of one per commit.
    if (!pending_.empty() && (pending_.size() >= kBatch || now >= pending_since_ + kGather)) {
      work_.swap(pending_);
    } else if (!pending_.empty()) {
      gathered = pending_since_ + kGather;
    }
    idle = pending_.empty();
  }
  append(work_);
  work_.clear();
  // Hashes still gathering come first (the interval is checked after them, never in a spin).
  if (!idle) return gathered;
  // The interval passed with rows unsigned and none coming: sign them now.
  const auto unsignedRows = [&] {
    return static_cast<std::int64_t>(tree_.size()) > last_position_;
  };
  if (unsignedRows() && Clock::now() >= last_time_ + interval_) deliver(sign());
  return unsignedRows() ? last_time_ + interval_ : Clock::time_point::max();
}

void Checkpointer::append(const std::vector<Digest>& row_hashes) {
  for (const Digest& d : row_hashes) {
    tree_.append(d);
    if (tree_.size() - static_cast<std::uint64_t>(last_position_) >= every_rows_) deliver(sign());
  }
}

void Checkpointer::deliver(CheckpointRow row) {
  std::unique_lock lock(mu_);
  if (stopping_) {
    // The writer is closing and inserts these itself (its queue is no longer read).
    collected_.push_back(std::move(row));
    return;
  }
  lock.unlock();
  emit_(std::move(row));
}

std::vector<CheckpointRow> Checkpointer::finish() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  loop_.stop();
  // The loop has stopped: the hashes it had not taken yet go into the tree here.
  std::vector<Digest> rest;
  {
    std::lock_guard lock(mu_);
    rest.swap(pending_);
  }
  append(rest);
  std::vector<CheckpointRow> rows = std::move(collected_);
  collected_.clear();
  if (static_cast<std::int64_t>(tree_.size()) > last_position_) rows.push_back(sign());
  return rows;
}

}  // namespace sluice::audit::detail
