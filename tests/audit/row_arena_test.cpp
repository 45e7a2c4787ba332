// How events travel from producers to the writer (rows.hpp RowArena): values come back out of
// the arena exactly as they went in, and a row the store packed and wrote carries the hash of
// the event's own values (the encoding of docs/audit.md, unchanged by the packing).
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "audit_test_util.hpp"
#include "row_hash.hpp"
#include "rows.hpp"

namespace sluice::audit {
namespace {

using detail::Value;
using testing::RawDb;
using testing::TempDir;

TEST(RowArenaTest, ValuesComeBackAsTheyWentIn) {
  detail::RowArena arena;
  std::string text = "pypi.org";
  const std::array<Value, 6> first = {Value{},
                                      Value{std::int64_t{-7}},
                                      Value{std::string_view(text)},
                                      Value{std::string_view()},
                                      Value{detail::Real{2.5}},
                                      Value{detail::Blob{"\x01\x00\x02"}}};
  const auto a = arena.append(first);
  text = "overwritten";  // the arena holds its own copy
  const std::array<Value, 2> second = {Value{std::string_view("second")}, Value{std::int64_t{9}}};
  const auto b = arena.append(second);

  std::array<Value, detail::kMaxColumns> out;
  auto got = arena.values(a, out);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(got[0]));
  EXPECT_EQ(std::get<std::int64_t>(got[1]), -7);
  EXPECT_EQ(std::get<std::string_view>(got[2]), "pypi.org");
  EXPECT_EQ(std::get<std::string_view>(got[3]), "");  // empty text stays text, not NULL
  EXPECT_EQ(std::get<detail::Real>(got[4]).v, 2.5);
  EXPECT_EQ(std::get<detail::Blob>(got[5]).v, std::string_view("\x01\x00\x02"));
  got = arena.values(b, out);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(std::get<std::string_view>(got[0]), "second");
  EXPECT_EQ(std::get<std::int64_t>(got[1]), 9);
}

TEST(RowArenaTest, SwapHandsOverTheRowsAndLeavesAnEmptyArena) {
  detail::RowArena producer, writer;
  const std::array<Value, 1> row = {Value{std::string_view("c-1")}};
  const auto span = producer.append(row);
  writer.swap(producer);
  producer.clear();
  std::array<Value, detail::kMaxColumns> out;
  EXPECT_EQ(std::get<std::string_view>(writer.values(span, out)[0]), "c-1");
  EXPECT_EQ(producer.append(row).first, 0u);  // the producer starts over
}

// The hash of a row written through the store equals the hash of the event's values computed
// directly: packing changes nothing a row's hash covers. Also: a request without injected
// secrets stores the empty JSON list.
TEST(RowArenaTest, PackedRowsAreHashedFromTheEventsOwnValues) {
  TempDir dir;
  auto db = dir / "audit.db";
  RequestEvent request = testing::sampleRequest(1);
  request.injected_secrets.clear();
  const ConnectionEvent connection = testing::sampleConnection(2);
  {
    auto store = testing::openStore(db);
    ASSERT_TRUE(store);
    store->recordRequest(request);
    store->recordConnection(connection);
    ASSERT_TRUE(store->flush());
  }
  detail::RowHasher hasher;
  detail::RowScratch scratch;
  std::array<Value, detail::kMaxColumns> values;
  const auto& req = detail::rowOf<RequestEvent>();
  const std::string first = hasher.hash(
      req.table.name, 1, detail::kGenesisHash,
      detail::hashedValues(req.table, detail::rowValues(req, request, scratch, values)));
  const auto& conn = detail::rowOf<ConnectionEvent>();
  const std::string second = hasher.hash(
      conn.table.name, 2, first,
      detail::hashedValues(conn.table, detail::rowValues(conn, connection, scratch, values)));
  RawDb raw(db);
  EXPECT_EQ(raw.text("SELECT hash FROM requests WHERE seq = 1"), first);
  EXPECT_EQ(raw.text("SELECT hash FROM connections WHERE seq = 2"), second);
  EXPECT_EQ(raw.text("SELECT injected_secrets FROM requests"), "[]");
}

// The canonical encoding (docs/audit.md "Hash chain") pinned by a digest computed independently
// (Python's hashlib over the documented bytes): a faster encoder must write the same bytes.
TEST(RowHashTest, EncodingIsPinned) {
  detail::RowHasher hasher;
  const std::array<Value, 5> values = {Value{std::string_view("c-exec-1-1")}, Value{},
                                       Value{std::int64_t{-2}}, Value{std::string_view("")},
                                       Value{std::int64_t{1'763'700'000'123}}};
  EXPECT_EQ(hasher.hash("requests", 258, detail::kGenesisHash, values),
            "0fd4b1eddfc429ebffc0668fbf493f0462b177970b87a1f6f9cf90ce7d973b58");
}

}  // namespace
}  // namespace sluice::audit
