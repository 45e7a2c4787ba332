// Issue 21, item 2: every stored column of the audit store is covered by a row hash or a
// checkpoint signature, or re-derived and checked by `verify`. A real signed store gets every
// table filled through the public Store API; then, on a fresh copy each time, exactly one value
// is changed with raw SQLite (every column of every table, as the database itself lists them,
// on its first, middle and last rows, to several values: another of the same type, NULL, a
// value of another type where STRICT lets one in), or one row is deleted, or two rows swap
// places. `verify --pubkey` must catch every one.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "audit_test_util.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

struct Column {
  std::string name;
  bool generated = false;  // PRAGMA table_xinfo hidden = 2 (VIRTUAL) or 3 (STORED)
  std::string type;
};

/// Every table and its columns, read from the database itself: a column added to the schema
/// later is mutated too, without anyone listing it here.
std::map<std::string, std::vector<Column>> schemaOf(RawDb& raw) {
  std::map<std::string, std::vector<Column>> out;
  std::vector<std::string> tables;
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(raw.get(),
                     "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                     "'sqlite_%' ORDER BY name",
                     -1, &s, nullptr);
  while (sqlite3_step(s) == SQLITE_ROW)
    tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  sqlite3_finalize(s);
  for (const auto& t : tables) {
    sqlite3_prepare_v2(raw.get(),
                       ("SELECT name, hidden, type FROM pragma_table_xinfo('" + t + "')").c_str(),
                       -1, &s, nullptr);
    while (sqlite3_step(s) == SQLITE_ROW) {
      out[t].push_back({reinterpret_cast<const char*>(sqlite3_column_text(s, 0)),
                        sqlite3_column_int(s, 1) >= 2,
                        reinterpret_cast<const char*>(sqlite3_column_text(s, 2))});
    }
    sqlite3_finalize(s);
  }
  return out;
}

std::vector<std::int64_t> rowids(RawDb& raw, const std::string& table) {
  std::vector<std::int64_t> out;
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(raw.get(), ("SELECT rowid FROM " + table + " ORDER BY rowid").c_str(), -1, &s,
                     nullptr);
  while (sqlite3_step(s) == SQLITE_ROW) out.push_back(sqlite3_column_int64(s, 0));
  sqlite3_finalize(s);
  return out;
}

/// The first, middle and last of `ids` (fewer when there are fewer).
std::vector<std::int64_t> sampleOf(const std::vector<std::int64_t>& ids) {
  std::set<std::int64_t> picked;
  if (!ids.empty()) picked = {ids.front(), ids[ids.size() / 2], ids.back()};
  return {picked.begin(), picked.end()};
}

/// New values for a column, as SQL expressions over the row's current value: another value of
/// the same type (changed at the end, at the start, same length, case), NULL, and other types
/// (STRICT converts '7' into 7 for an INTEGER column and 7 into '7' for a TEXT one, and refuses
/// what it cannot convert: those are counted as refused, not as mutations).
std::vector<std::string> newValues(const std::string& c) {
  return {
      c + " + 1",
      c + " - 1",
      c + " || 'x'",
      "'x' || " + c,
      // Same length, last character changed.
      "substr(" + c + ", 1, length(" + c + ") - 1) || CASE WHEN substr(" + c +
          ", -1) = '0' THEN '1' ELSE '0' END",
      "upper(" + c + ")",
      "NULL",
      "''",
      "0",
      "'x'",
      "CAST(" + c + " AS TEXT)",
      "CAST(" + c + " AS INTEGER)",
      "X'00'",
  };
}

/// The table's CREATE statement with the definition of generated column `c` replaced by a
/// constant of its type ("" if it has none): what an editor of the schema
/// (PRAGMA writable_schema) could do to change what queries show without touching a row.
std::string withForgedDefinition(const std::string& create, const Column& c) {
  const std::string marker = "GENERATED ALWAYS AS (";
  std::size_t at = create.find(c.name + " ");
  if (at == std::string::npos) return "";
  at = create.find(marker, at);
  if (at == std::string::npos) return "";
  const std::size_t open = at + marker.size() - 1;
  std::size_t close = open;
  for (int depth = 0; close < create.size(); ++close) {
    if (create[close] == '(') ++depth;
    if (create[close] == ')' && --depth == 0) break;
  }
  const std::string constant = c.type == "INTEGER" ? "(-1)" : "('forged')";
  return create.substr(0, open) + constant + create.substr(close + 1);
}

/// `s` as an SQL string literal.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("''") : std::string(1, ch);
  return out + "'";
}

struct Outcome {
  bool caught = false;
  bool error = false;      // verify refused to read the database (exit 2) rather than name a row
  bool tail_only = false;  // verify passed but reported rows as unsigned
  std::string why;
};

class MutationBattery : public ::testing::Test {
 protected:
  void SetUp() override {
    auto keys = testing::generateKeys();
    ASSERT_TRUE(keys.key && keys.pub);
    pub_ = keys.pub;
    build(keys.key);
    RawDb raw(base_);
    // Everything in the main file, so that copying it copies the whole store.
    ASSERT_EQ(raw.exec("PRAGMA wal_checkpoint(TRUNCATE)"), "");
  }

  /// A store with rows in every table, written the way sluice writes them, signed every 7 rows.
  void build(std::shared_ptr<const SigningKey> key) {
    StoreOptions o;
    o.signing_key = std::move(key);
    o.checkpoint_rows = 7;
    auto store = testing::openStore(base_, o);
    ASSERT_TRUE(store);
    const std::string other = testing::kPolicyText + "# second revision\n";
    testing::recordSamplePolicy(*store);
    for (std::string exec : {"exec-1", "exec-2", "exec-3"}) {
      if (exec == "exec-3") store->recordPolicy(testing::sha256Hex(other), "data-analysis", other);
      for (int i = 0; i < 3; ++i) {
        store->recordDns(testing::sampleDns(i, exec, i == 2 ? Decision::kDeny : Decision::kAllow));
        store->recordConnection(
            testing::sampleConnection(i, exec, i == 2 ? Decision::kDeny : Decision::kAllow));
        store->recordForward(testing::sampleForward(i, exec));
        store->recordRequest(testing::sampleRequest(i, exec));
        store->recordApproval(testing::sampleApproval(i, exec));
        ASSERT_TRUE(store->flush().has_value());
      }
      auto e = testing::sampleExecution(exec);
      e.limit_hit = exec == "exec-2" ? "timeout" : "";
      e.receipt_json = R"({"execution_id":")" + exec +
                       R"(","workflow":"data-analysis","caller":"uid:1000","session_id":"se-1"})";
      ASSERT_TRUE(store->recordExecution(e).has_value());
    }
  }

  /// Runs `sql` on a fresh copy of the store; nullopt when SQLite refused it (constraint,
  /// STRICT type) or it changed nothing (`changed` compares the row before and after), else what
  /// verify --pubkey made of it.
  std::optional<Outcome> mutate(const std::string& sql, const std::string& changed = "") {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(work_.string() + suffix, ec);
    std::filesystem::copy_file(base_, work_);
    {
      RawDb raw(work_);
      raw.exec("PRAGMA synchronous = OFF");  // a scratch copy: no fsync per mutation
      const std::string before = changed.empty() ? "" : raw.text(changed);
      if (!raw.exec(sql).empty()) return std::nullopt;
      if (!changed.empty() && raw.text(changed) == before) return std::nullopt;
    }
    Outcome o;
    auto v = verify(work_, pub_.get());
    if (!v) {
      o.caught = o.error = true;  // verify refused the database outright: it fails closed too
      o.why = v.error().message;
    } else if (!v->ok) {
      o.caught = true;
      o.why = v->first_broken;
    } else if (v->unsigned_tail > 0) {
      o.caught = o.tail_only = true;
      o.why = std::to_string(v->unsigned_tail) + " rows reported unsigned";
    }
    return o;
  }

  /// Records one applied mutation.
  void expectCaught(const std::string& what, const std::optional<Outcome>& o) {
    if (!o) {
      ++refused_;
      return;
    }
    ++applied_;
    if (o->caught) ++caught_;
    if (o->error) ++errors_;
    if (o->tail_only) tail_only_.push_back(what);
    EXPECT_TRUE(o->caught) << "NOT caught: " << what;
  }

  TempDir dir_;
  std::filesystem::path base_ = dir_ / "base.db";
  std::filesystem::path work_ = dir_ / "work.db";
  std::shared_ptr<const PublicKey> pub_;
  int applied_ = 0, caught_ = 0, refused_ = 0, errors_ = 0;
  std::vector<std::string> tail_only_;
};

TEST_F(MutationBattery, EveryChangedValueDeletedRowAndReorderingIsCaughtByVerify) {
  RawDb base(base_);
  const auto schema = schemaOf(base);
  // The intact store verifies, every row signed; and it has rows in every table.
  auto intact = verify(base_, pub_.get());
  ASSERT_TRUE(intact.has_value()) << intact.error().message;
  ASSERT_TRUE(intact->ok) << intact->first_broken;
  ASSERT_EQ(intact->unsigned_tail, 0u);
  ASSERT_GE(intact->checkpoints, 3u);
  for (const auto& [table, columns] : schema)
    ASSERT_FALSE(rowids(base, table).empty()) << table << " has no rows to mutate";

  // 1. One value in every column of every table.
  std::map<std::string, int> per_column;
  for (const auto& [table, columns] : schema) {
    for (std::int64_t id : sampleOf(rowids(base, table))) {
      const std::string where = " WHERE rowid = " + std::to_string(id);
      for (const Column& c : columns) {
        if (c.generated) {
          // Derived from other columns (executions.caller from receipt, requests.id = seq):
          // SQLite refuses to write them, so there is nothing to mutate.
          EXPECT_FALSE(mutate("UPDATE " + table + " SET " + c.name + " = 'x'" + where))
              << table << "." << c.name << " is generated but writable";
          continue;
        }
        for (const std::string& value : newValues(c.name)) {
          auto o = mutate("UPDATE " + table + " SET " + c.name + " = " + value + where,
                          "SELECT quote(" + c.name + ") FROM " + table + where);
          if (o) ++per_column[table + "." + c.name];
          expectCaught(table + "." + c.name + " = " + value + where, o);
        }
      }
    }
  }
  // Every column but one took mutations: chain_head.id is CHECK (id = 0), so SQLite refuses
  // every other value.
  std::vector<std::string> unwritable;
  for (const auto& [table, columns] : schema) {
    for (const Column& c : columns) {
      if (!c.generated && per_column[table + "." + c.name] == 0)
        unwritable.push_back(table + "." + c.name);
    }
  }
  EXPECT_EQ(unwritable, std::vector<std::string>{"chain_head.id"});

  // Generated columns are not stored, but their definitions are: one rewritten in the schema
  // would change what queries show. verify re-derives them.
  int generated = 0;
  for (const auto& [table, columns] : schema) {
    for (const Column& c : columns) {
      if (!c.generated) continue;
      const std::string schema_sql = "SELECT sql FROM sqlite_master WHERE name = '" + table + "'";
      const std::string forged = withForgedDefinition(base.text(schema_sql), c);
      ASSERT_FALSE(forged.empty()) << table << "." << c.name;
      const std::string what =
          "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = " + quoted(forged) +
          " WHERE type = 'table' AND name = '" + table + "'";
      auto o = mutate(what, schema_sql);
      ASSERT_TRUE(o) << what;
      expectCaught(table + "." + c.name + " redefined in the schema", o);
      ++generated;
    }
  }
  EXPECT_EQ(generated, 3);  // executions.caller, executions.session_id, requests.id

  // 2. Every row of every table deleted, one at a time.
  for (const auto& [table, columns] : schema) {
    for (std::int64_t id : rowids(base, table)) {
      const std::string what = "DELETE FROM " + table + " WHERE rowid = " + std::to_string(id);
      expectCaught(what, mutate(what));
    }
  }

  // 3. Rows swapped (two rows of a table exchange places: the same as exchanging every other
  // column), and a row moved to the end or the front.
  for (const auto& [table, columns] : schema) {
    const auto ids = rowids(base, table);
    if (ids.size() < 2) continue;
    auto swap = [&](std::int64_t a, std::int64_t b) {
      const std::string what =
          "UPDATE " + table + " SET rowid = -999 WHERE rowid = " + std::to_string(a) + "; UPDATE " +
          table + " SET rowid = " + std::to_string(a) + " WHERE rowid = " + std::to_string(b) +
          "; UPDATE " + table + " SET rowid = " + std::to_string(b) + " WHERE rowid = -999";
      expectCaught(what, mutate(what));
    };
    swap(ids[0], ids[1]);
    swap(ids[0], ids.back());
    swap(ids[ids.size() / 2], ids[ids.size() / 2 + 1]);
    for (const std::string& to : {"(SELECT max(rowid) FROM " + table + ") + 1", std::string("0")}) {
      const std::string what =
          "UPDATE " + table + " SET rowid = " + to + " WHERE rowid = " + std::to_string(ids[0]);
      expectCaught(what, mutate(what));
    }
  }
  // Neighbours in the chain from different tables exchange their seq.
  int cross = 0;
  std::vector<std::pair<std::string, std::int64_t>> chain;
  for (const auto& [table, columns] : schema) {
    if (table == "checkpoints" || table == "chain_head") continue;
    for (std::int64_t id : rowids(base, table)) chain.emplace_back(table, id);
  }
  std::sort(chain.begin(), chain.end(), [](auto& a, auto& b) { return a.second < b.second; });
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
    const auto& [t1, s1] = chain[i];
    const auto& [t2, s2] = chain[i + 1];
    if (t1 == t2) continue;
    const std::string what = "UPDATE " + t1 + " SET seq = -999 WHERE seq = " + std::to_string(s1) +
                             "; UPDATE " + t2 + " SET seq = " + std::to_string(s1) +
                             " WHERE seq = " + std::to_string(s2) + "; UPDATE " + t1 +
                             " SET seq = " + std::to_string(s2) + " WHERE seq = -999";
    expectCaught(what, mutate(what));
    ++cross;
  }
  EXPECT_GT(cross, 10);

  // The one mutation a database alone cannot show: deleting the newest checkpoint leaves a
  // consistent, shorter signed prefix. verify reports those rows as an unsigned tail (which
  // --require-signed-tail refuses); only a checkpoint kept elsewhere proves more.
  const std::string newest = "DELETE FROM checkpoints WHERE rowid = " +
                             std::to_string(base.integer("SELECT max(rowid) FROM checkpoints"));
  for (const std::string& what : tail_only_) EXPECT_EQ(what, newest) << "only an unsigned tail";

  std::printf(
      "mutation battery: %d mutations applied, %d caught (%.1f%%; %d of them as an unreadable "
      "database, %zu only as an unsigned tail), %d refused by SQLite\n",
      applied_, caught_, applied_ ? 100.0 * caught_ / applied_ : 0.0, errors_, tail_only_.size(),
      refused_);
  EXPECT_EQ(caught_, applied_);
  EXPECT_GT(applied_, 500);
}

// checkpoints.seq is checked as 1, 2, ... in position order, so writers keep it that way: two
// signing writers on one database both sign the chain's end when they close, and the second,
// finding a checkpoint there already, adds none (it would cover nothing more).
TEST(CheckpointNumbering, TwoSigningWritersLeaveOneCheckpointPerPosition) {
  TempDir dir;
  auto db = dir / "audit.db";
  auto keys = testing::generateKeys();
  ASSERT_TRUE(keys.key && keys.pub);
  StoreOptions o = keys.options();
  o.checkpoint_interval = std::chrono::hours(1);  // only the closes sign
  auto a = testing::openStore(db, o);
  auto b = testing::openStore(db, o);
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 5; ++i) a->recordConnection(testing::sampleConnection(i, "exec-a"));
  ASSERT_TRUE(a->flush().has_value());
  for (int i = 0; i < 5; ++i) b->recordConnection(testing::sampleConnection(i, "exec-b"));
  ASSERT_TRUE(b->flush().has_value());
  b.reset();  // signs rows 1..10
  a.reset();  // caught up to row 10 too: nothing past the stored checkpoint to add
  RawDb raw(db);
  EXPECT_EQ(raw.text("SELECT group_concat(seq || ':' || position) FROM checkpoints"), "1:10");
  auto v = verify(db, keys.pub.get());
  ASSERT_TRUE(v.has_value()) << v.error().message;
  EXPECT_TRUE(v->ok) << v->first_broken;
  EXPECT_EQ(v->unsigned_tail, 0u);
}

}  // namespace
}  // namespace sluice::audit
