// `verify`: walks the one hash chain across every chained table (chain_rows.hpp) in seq order,
// recomputing every hash and the policy texts' SHA-256; also checks the checkpoints (numbering,
// root, frontier, signature) and the chain head. Every stored column is covered by one of
// these (docs/audit.md, "What covers each column"); tests/audit/mutation_test.cpp proves it.
// With a public key it fails closed: a log without a checkpoint is unsigned, an unsigned tail
// can be refused, and a kept checkpoint must be extended (consistency.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "chain_rows.hpp"
#include "chain_source.hpp"
#include "consistency.hpp"
#include "merkle.hpp"
#include "row_hash.hpp"
#include "schema.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using detail::Stmt;
using detail::Value;

/// One table's rows in seq order, as a cursor for the merge of the chained tables.
struct Cursor {
  const detail::ChainTable* table = nullptr;
  Stmt stmt;
  bool has_row = false;
  std::int64_t seq = 0;

  std::expected<void, base::Error> next(const std::filesystem::path& path, sqlite3* db) {
    int rc = stmt.step();
    if (rc == SQLITE_ROW) {
      has_row = true;
      seq = stmt.columnInt(0);
      return {};
    }
    has_row = false;
    if (rc == SQLITE_DONE) return {};
    return std::unexpected(
        detail::sqliteError(path, db, rc, fmt::format("cannot read {}", table->name)));
  }

  /// Column i of the hashed columns, as SQLite stores it (the storage class is hashed too).
  Value value(std::size_t i) const {
    int col = static_cast<int>(i + 3);
    sqlite3_stmt* s = stmt.get();
    switch (sqlite3_column_type(s, col)) {
      case SQLITE_INTEGER:
        return Value{static_cast<std::int64_t>(sqlite3_column_int64(s, col))};
      case SQLITE_FLOAT:
        return Value{detail::Real{sqlite3_column_double(s, col)}};
      case SQLITE_TEXT:
        return Value{stmt.columnText(col)};
      case SQLITE_BLOB: {
        const void* p = sqlite3_column_blob(s, col);
        return Value{detail::Blob{std::string_view(
            static_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s, col)))}};
      }
      default:
        return Value{};
    }
  }

  /// The text of the table's key column ("" when it has none).
  std::string_view key() const {
    const auto& cols = table->columns;
    const auto k = std::find(cols.begin(), cols.end(), table->key_column);
    if (table->key_column.empty() || k == cols.end()) return {};
    return stmt.columnText(static_cast<int>(k - cols.begin()) + 3);
  }
};

/// chainSelectSql's columns, then whether the generated columns hold (generated_check).
std::string verifySelectSql(const detail::ChainTable& t) {
  return fmt::format("SELECT seq, prev_hash, hash, {}, {} FROM {} WHERE seq > ?1 ORDER BY seq",
                     detail::columnList(t, ""), t.generated_check, t.name);
}

/// The chain as the SQLite store holds it: one cursor per chained table, merged by seq, read
/// in one snapshot; rows after seq `after` and checkpoints past that position.
class SqliteChainSource final : public detail::ChainSource {
 public:
  // Every row by default, even one inserted at seq <= 0 (which the walk reports as a duplicate).
  explicit SqliteChainSource(std::filesystem::path db,
                             std::int64_t after = std::numeric_limits<std::int64_t>::min())
      : db_(std::move(db)), after_(after) {}

  std::expected<void, base::Error> open() {
    auto conn = detail::openReadSnapshot(db_);
    if (!conn) return std::unexpected(conn.error());
    conn_ = std::move(*conn);
    raw_ = conn_.get();
    for (const auto& t : detail::chainTables()) {
      auto s = detail::prepare(db_, raw_, verifySelectSql(t));
      if (!s) return std::unexpected(s.error());
      Cursor c;
      c.table = &t;
      c.stmt = std::move(*s);
      c.stmt.bindInt(1, after_);
      if (auto r = c.next(db_, raw_); !r) return r;
      cursors_.push_back(std::move(c));
    }
    auto ckpt = detail::prepare(db_, raw_,
                                "SELECT seq, position, root, signature, key_id, ts, frontier "
                                "FROM checkpoints WHERE position > ?1 ORDER BY position, seq");
    if (!ckpt) return std::unexpected(ckpt.error());
    ckpt_ = std::move(*ckpt);
    ckpt_.bindInt(1, after_);
    return {};
  }

  std::expected<bool, base::Error> nextRow(detail::ChainRow& row) override {
    if (last_) {
      if (auto r = last_->next(db_, raw_); !r) return std::unexpected(r.error());
    }
    last_ = nullptr;
    for (auto& c : cursors_) {
      if (c.has_row && (!last_ || c.seq < last_->seq)) last_ = &c;
    }
    if (!last_) return false;
    const Cursor& cur = *last_;
    values_.clear();
    for (std::size_t i = 0; i < cur.table->columns.size(); ++i) values_.push_back(cur.value(i));
    row = {cur.table,
           cur.seq,
           cur.stmt.columnText(1),
           cur.stmt.columnText(2),
           values_,
           cur.key(),
           cur.stmt.columnInt(static_cast<int>(cur.table->columns.size() + 3)) == 1};
    return true;
  }

  std::expected<bool, base::Error> nextCheckpoint(detail::CheckpointRow& c) override {
    const int rc = ckpt_.step();
    if (rc == SQLITE_DONE) return false;
    if (rc != SQLITE_ROW)
      return std::unexpected(detail::sqliteError(db_, raw_, rc, "cannot read checkpoints"));
    c = {ckpt_.columnInt(0),  ckpt_.columnInt(1), ckpt_.columnText(2), ckpt_.columnText(3),
         ckpt_.columnText(4), ckpt_.columnInt(5), ckpt_.columnText(6)};
    return true;
  }

  std::expected<std::optional<detail::ChainHead>, base::Error> head() override {
    auto head = detail::prepare(db_, raw_, "SELECT seq, hash FROM chain_head WHERE id = 0");
    if (!head) return std::unexpected(head.error());
    if (head->step() != SQLITE_ROW) return std::nullopt;
    return detail::ChainHead{head->columnInt(0), std::string(head->columnText(1))};
  }

  std::string_view headName() const override { return "chain_head"; }

 private:
  const std::filesystem::path db_;
  const std::int64_t after_;
  detail::Db conn_;  // before the statements: they are finalized first
  sqlite3* raw_ = nullptr;
  std::vector<Cursor> cursors_;
  Cursor* last_ = nullptr;  // the cursor of the row last handed out
  Stmt ckpt_;
  std::vector<Value> values_;
};

/// "connections seq 57 (id c-1)", "policies seq 3 (sha256 ab12...)": how a broken row is named.
std::string rowName(const detail::ChainRow& row) {
  if (row.table->key_column.empty())
    return fmt::format("{} seq {} (id {})", row.table->name, row.seq, row.seq);
  return fmt::format("{} seq {} ({} {})", row.table->name, row.seq, row.table->key_column, row.key);
}

/// A policies row's values (rows.cpp): sha256 is the SHA-256 of yaml, both text.
bool policyTextMatches(detail::RowHasher& hasher, std::span<const Value> values) {
  const auto* sha = std::get_if<std::string_view>(&values[0]);
  const auto* yaml = std::get_if<std::string_view>(&values[2]);
  return sha && yaml && hasher.sha256(*yaml) == *sha;
}

/// The database's header says WAL mode (file format bytes 18 and 19 are 2) but there is no -wal
/// file beside it. Checked before opening: SQLite creates an empty -wal for a reader.
bool walMissing(const std::filesystem::path& db) {
  std::ifstream in(db, std::ios::binary);
  char header[20] = {};
  if (!in.read(header, sizeof header)) return false;
  std::error_code ec;
  return header[18] == 2 && header[19] == 2 && !std::filesystem::exists(db.string() + "-wal", ec);
}

/// The chain walk, the checkpoints where it reaches them, the head and the policies; feeds
/// `consistency` (when given) the tree after every row. One use: run() once.
class ChainWalk {
 public:
  ChainWalk(detail::ChainSource& source, const PublicKey* pubkey,
            detail::ConsistencyCheck* consistency)
      : source_(source), pubkey_(pubkey), consistency_(consistency) {}

  std::expected<VerifyResult, base::Error> run() {
    if (auto r = nextCheckpoint(); !r) return std::unexpected(r.error());
    // The tree is kept when there is a checkpoint, or a key or a kept checkpoint asks for it.
    if (has_ckpt_ || pubkey_ || consistency_) tree_.emplace();
    if (has_ckpt_ && ckpt_.position < 1)
      return broken(fmt::format("{}: covers no rows", checkpointName()));
    detail::ChainRow row;
    for (;;) {
      auto more = source_.nextRow(row);
      if (!more) return std::unexpected(more.error());
      if (!*more) break;
      if (std::string why = checkRow(row); !why.empty()) return broken(std::move(why));
      auto here = checkCheckpointsHere();
      if (!here) return std::unexpected(here.error());
      if (!here->empty()) return broken(std::move(*here));
      ++expected_seq_;
      ++result_.rows;
    }
    return checkEnd();
  }

 private:
  std::expected<void, base::Error> nextCheckpoint() {
    auto more = source_.nextCheckpoint(ckpt_);
    if (!more) return std::unexpected(more.error());
    has_ckpt_ = *more;
    return {};
  }

  /// `row` against the chain so far; "" when good (then it extends the chain).
  std::string checkRow(const detail::ChainRow& row) {
    if (row.seq > expected_seq_) {
      return fmt::format("{}: sequence gap: rows {}..{} are missing (deleted)", rowName(row),
                         expected_seq_, row.seq - 1);
    }
    if (row.seq < expected_seq_)
      return fmt::format("{}: seq {} appears twice (a row was inserted)", rowName(row), row.seq);
    if (hasher_.hash(row.table->name, row.seq, row.prev_hash,
                     detail::hashedValues(*row.table, row.values)) != row.hash) {
      return fmt::format(
          "{}: hash does not match the row's contents (row edited, inserted or moved)",
          rowName(row));
    }
    if (row.prev_hash != prev_) {
      return fmt::format(
          "{}: prev_hash does not match the hash of the row before it (a row was deleted, "
          "inserted or reordered)",
          rowName(row));
    }
    if (!row.generated_ok) {
      return fmt::format(
          "{}: a generated column does not equal its definition (the schema was edited)",
          rowName(row));
    }
    // Policy rows are content-addressed too: the key must be the text's SHA-256.
    if (row.table->name == "policies" && !policyTextMatches(hasher_, row.values))
      return fmt::format("{}: the policy text does not match its sha256 (edited)", rowName(row));
    prev_ = std::string(row.hash);
    if (tree_) {
      tree_->append(*detail::fromHex(row.hash));  // a valid hash: it matched the computed one
      if (consistency_) consistency_->observe(*tree_);
    }
    return {};
  }

  /// The checkpoints at the row just walked; "" when they hold.
  std::expected<std::string, base::Error> checkCheckpointsHere() {
    while (tree_ && has_ckpt_ && ckpt_.position == expected_seq_) {
      if (std::string why = checkCheckpoint(); !why.empty()) return why;
      if (auto r = nextCheckpoint(); !r) return std::unexpected(r.error());
    }
    return std::string{};
  }

  /// The current checkpoint, against the tree of the rows walked so far; "" when good.
  std::string checkCheckpoint() {
    const std::int64_t position = ckpt_.position;
    const std::string root(ckpt_.root);
    if (ckpt_.seq != next_checkpoint_) {
      return fmt::format(
          "{}: checkpoints are not numbered 1, 2, ... in position order (expected seq {} here: "
          "a checkpoint was deleted, renumbered or moved)",
          checkpointName(), next_checkpoint_);
    }
    ++next_checkpoint_;
    if (root != detail::toHex(tree_->root())) {
      return fmt::format(
          "{}: its root is not the Merkle root of rows 1..{} (a row it covers was changed, "
          "deleted or re-hashed, or the checkpoint was edited)",
          checkpointName(), position);
    }
    // Not signed, so re-derived: the next writer resumes its tree from it.
    if (ckpt_.frontier != tree_->serialize())
      return fmt::format("{}: its frontier is not the Merkle tree's right edge at {} (edited)",
                         checkpointName(), position);
    if (pubkey_) {
      if (ckpt_.key_id != pubkey_->keyId()) {
        return fmt::format("{}: signed by key {}, not by the given public key {}", checkpointName(),
                           ckpt_.key_id, pubkey_->keyId());
      }
      auto sig = base64Decode(ckpt_.signature);
      if (!sig || !pubkey_->verify(checkpointSignedText(position, root, ckpt_.ts), *sig)) {
        return fmt::format("{}: the signature does not verify (forged or altered checkpoint)",
                           checkpointName());
      }
      result_.last_signed_position = position;
    }
    ++result_.checkpoints;
    return {};
  }

  /// After the last row: no checkpoint beyond it, and the head names it.
  std::expected<VerifyResult, base::Error> checkEnd() {
    if (has_ckpt_) {
      return broken(fmt::format(
          "{}: covers rows up to seq {} but the chain ends at seq {} (rows deleted from the end)",
          checkpointName(), ckpt_.position, expected_seq_ - 1));
    }
    result_.signatures_checked = pubkey_ != nullptr;
    result_.unsigned_tail = result_.rows - static_cast<std::uint64_t>(result_.last_signed_position);
    auto head = source_.head();
    if (!head) return std::unexpected(head.error());
    if (!*head) return broken(fmt::format("{}: the row is missing", source_.headName()));
    if ((*head)->seq != expected_seq_ - 1 || (*head)->hash != prev_) {
      return broken(
          fmt::format("{}: records seq {} but the chain ends at seq {} (rows "
                      "deleted from the end, or the head was edited)",
                      source_.headName(), (*head)->seq, expected_seq_ - 1));
    }
    result_.ok = true;
    return result_;
  }

  std::string checkpointName() const {
    return fmt::format("checkpoint seq {} (position {})", ckpt_.seq, ckpt_.position);
  }

  VerifyResult broken(std::string why) {
    result_.ok = false;
    result_.failure = VerifyFailure::kBroken;
    result_.first_broken = std::move(why);
    return result_;
  }

  detail::ChainSource& source_;
  const PublicKey* pubkey_;
  detail::ConsistencyCheck* consistency_;
  detail::CheckpointRow ckpt_;
  bool has_ckpt_ = false;
  std::optional<detail::MerkleFrontier> tree_;
  detail::RowHasher hasher_;
  VerifyResult result_;
  std::string prev_{detail::kGenesisHash};
  std::int64_t expected_seq_ = 1;
  std::int64_t next_checkpoint_ = 1;  // checkpoints are numbered 1, 2, ... in position order
};

}  // namespace

std::expected<VerifyResult, base::Error> verify(const std::filesystem::path& db,
                                                const PublicKey* pubkey) {
  VerifyOptions options;
  options.pubkey = pubkey;
  return verify(db, options);
}

std::expected<VerifyResult, base::Error> verify(const std::filesystem::path& db,
                                                const VerifyOptions& options) {
  const bool wal_missing = walMissing(db);
  SqliteChainSource source(db);
  if (auto r = source.open(); !r) return std::unexpected(r.error());
  auto result = detail::verifyChain(source, options, wal_missing);
  if (result) result->wal_missing = wal_missing;
  return result;
}

namespace detail {

std::expected<std::unique_ptr<ChainSource>, base::Error> openSqliteChain(
    const std::filesystem::path& db, std::int64_t after) {
  auto source = std::make_unique<SqliteChainSource>(db, after);
  if (auto r = source->open(); !r) return std::unexpected(r.error());
  return source;
}

std::expected<VerifyResult, base::Error> verifyChain(ChainSource& source,
                                                     const VerifyOptions& options,
                                                     bool wal_missing) {
  std::optional<detail::ConsistencyCheck> consistency;
  if (options.consistent_with) {
    if (!options.pubkey) {
      return std::unexpected(
          base::Error{base::Code::kInvalidArgument,
                      "a kept checkpoint is only evidence with the public key that signed it"});
    }
    auto kept = detail::parseKeptCheckpoint(*options.consistent_with, *options.pubkey);
    if (!kept)
      return std::unexpected(base::Error{base::Code::kInvalidArgument,
                                         options.consistent_with_name + ": " + kept.error()});
    consistency.emplace(std::move(*kept));
  }
  auto result = ChainWalk(source, options.pubkey, consistency ? &*consistency : nullptr).run();
  if (!result || !result->ok) return result;
  auto failed = [&](VerifyFailure f, std::string why) {
    result->ok = false;
    result->failure = f;
    result->first_broken = std::move(why);
    return result;
  };
  if (consistency) {
    if (std::string why = consistency->verdict(result->rows); !why.empty())
      return failed(VerifyFailure::kRewritten, std::move(why));
  }
  if (options.pubkey && result->checkpoints == 0) {
    return failed(VerifyFailure::kUnsigned,
                  fmt::format("the log is unsigned: no checkpoint signed by key {} ({} rows are "
                              "protected by the hash chain only){}",
                              options.pubkey->keyId(), result->rows,
                              wal_missing ? "; the -wal file is missing: a copy taken without it "
                                            "lacks the rows still in it"
                                          : ""));
  }
  if (options.require_signed_tail && result->unsigned_tail > 0) {
    return failed(
        VerifyFailure::kUnsignedTail,
        fmt::format("rows {}..{} ({} rows) are not covered by a signed checkpoint",
                    result->last_signed_position + 1, result->rows, result->unsigned_tail));
  }
  return result;
}

}  // namespace detail
}  // namespace sluice::audit
