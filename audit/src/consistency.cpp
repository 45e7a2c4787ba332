// Kept checkpoints and the append-only check; see consistency.hpp and docs/audit.md
// ("Append-only: checkpoints kept off the box").
#include "consistency.hpp"

#include <fmt/format.h>

#include <bit>
#include <nlohmann/json.hpp>

#include "chain_rows.hpp"
#include "schema.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/base/json.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit::detail {

std::expected<KeptCheckpoint, std::string> parseKeptCheckpoint(std::string_view json,
                                                               const PublicKey& key) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  // A proof file carries its checkpoint under "checkpoint": accept that too.
  if (!j.is_discarded() && j.is_object() && j.contains("checkpoint")) j = j["checkpoint"];
  if (j.is_discarded() || !j.is_object()) return std::unexpected("not a JSON object");
  // Each field looked up without throwing (nlohmann's value() converts to the default's type).
  auto field = [&](const char* name) {
    auto it = j.find(name);
    return it == j.end() ? nlohmann::json() : *it;
  };
  const nlohmann::json root = field("root");
  if (!field("seq").is_number_integer() || !field("position").is_number_integer() ||
      !root.is_string() || !fromHex(root.get<std::string>()) || !field("ts").is_number_integer() ||
      !field("key_id").is_string() || !field("signature").is_string()) {
    return std::unexpected("seq, position, root, ts, key_id or signature missing or malformed");
  }
  KeptCheckpoint k;
  k.seq = j["seq"].get<std::int64_t>();
  k.position = j["position"].get<std::int64_t>();
  k.ts = j["ts"].get<std::int64_t>();
  k.root = j["root"].get<std::string>();
  k.key_id = j["key_id"].get<std::string>();
  k.signature = j["signature"].get<std::string>();
  if (k.position < 1) return std::unexpected("position is not a positive number");
  if (k.key_id != key.keyId())
    return std::unexpected(
        fmt::format("signed by key {}, not by the given key {}", k.key_id, key.keyId()));
  auto sig = base64Decode(k.signature);
  if (!sig || !key.verify(checkpointSignedText(k.position, k.root, k.ts), *sig))
    return std::unexpected("the signature does not verify");
  if (j.contains("frontier")) {
    const auto& f = j["frontier"];
    auto tree = f.is_string() ? MerkleFrontier::parse(static_cast<std::uint64_t>(k.position),
                                                      f.get<std::string>())
                              : std::nullopt;
    if (!tree || toHex(tree->root()) != k.root)
      return std::unexpected("its frontier does not fold to its signed root");
    k.frontier = std::move(*tree);
  }
  return k;
}

ConsistencyCheck::ConsistencyCheck(KeptCheckpoint kept) : kept_(std::move(kept)) {
  const auto position = static_cast<std::uint64_t>(kept_.position);
  if (!kept_.frontier) {
    subtrees_.push_back({0, position, *fromHex(kept_.root)});
    return;
  }
  // The frontier's nodes are the complete subtrees of the size's binary decomposition, largest
  // (leftmost) first: 13 = 8 + 4 + 1 -> leaves [0,8), [8,12), [12,13).
  std::uint64_t begin = 0;
  std::size_t i = 0;
  for (std::uint64_t bit = std::bit_floor(position); bit > 0; bit >>= 1) {
    if (!(position & bit)) continue;
    subtrees_.push_back({begin, begin + bit, kept_.frontier->nodes()[i++]});
    begin += bit;
  }
}

void ConsistencyCheck::observe(const MerkleFrontier& tree) {
  if (next_ >= subtrees_.size() || tree.size() != subtrees_[next_].end) return;
  const Subtree& s = subtrees_[next_++];
  // Grown to a prefix size of the kept tree, the walk's tree ends with the subtree [begin, end):
  // its last node is that subtree's root (without a frontier, the one subtree is the whole tree).
  const Digest ours = kept_.frontier ? tree.nodes().back() : tree.root();
  if (differs_) return;
  if (ours == s.root) {
    agreed_ = s.end;
  } else {
    differs_ = s;
  }
}

std::string ConsistencyCheck::name() const {
  return fmt::format("the kept checkpoint seq {} (position {})", kept_.seq, kept_.position);
}

std::string ConsistencyCheck::verdict(std::uint64_t rows) const {
  if (differs_) {
    if (differs_->end - differs_->begin == 1) {
      return fmt::format("history was rewritten at row {}: rows 1..{} match {} but row {} does not",
                         differs_->end, agreed_, name(), differs_->end);
    }
    return fmt::format(
        "history was rewritten at a row in {}..{}: rows 1..{} match {} but its subtree over rows "
        "{}..{} does not (a kept checkpoint locates the first rewritten row to one of its "
        "subtrees; keep checkpoints more often to narrow it)",
        differs_->begin + 1, differs_->end, agreed_, name(), differs_->begin + 1, differs_->end);
  }
  const auto position = static_cast<std::uint64_t>(kept_.position);
  if (rows >= position) return {};
  if (agreed_ == rows) {
    return fmt::format("the log ends at row {} but {} covers rows 1..{}: rows {}..{} were deleted",
                       rows, name(), position, rows + 1, position);
  }
  return fmt::format(
      "the log ends at row {} but {} covers rows 1..{}: history was rewritten or cut at a row in "
      "{}..{} (rows 1..{} match)",
      rows, name(), position, agreed_ + 1, rows + 1, agreed_);
}

}  // namespace sluice::audit::detail

namespace sluice::audit {

std::expected<std::optional<std::string>, base::Error> latestCheckpointJson(
    const std::filesystem::path& db) {
  auto conn = detail::openReadSnapshot(db);
  if (!conn) return std::unexpected(conn.error());
  auto st = detail::prepare(
      db, conn->get(),
      fmt::format("{}, frontier FROM checkpoints ORDER BY position DESC, seq DESC LIMIT 1",
                  detail::kCheckpointSelect.substr(0, detail::kCheckpointSelect.find(" FROM"))));
  if (!st) return std::unexpected(st.error());
  const int rc = st->step();
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW)
    return std::unexpected(detail::sqliteError(db, conn->get(), rc, "cannot read checkpoints"));
  nlohmann::ordered_json cp = detail::checkpointJson(st->get());
  cp["frontier"] = detail::columnJson(st->get(), 6);
  return base::dumpJson(cp);
}

std::expected<void, std::string> checkCheckpointJson(std::string_view json, const PublicKey& key) {
  auto kept = detail::parseKeptCheckpoint(json, key);
  if (!kept) return std::unexpected(kept.error());
  return {};
}

}  // namespace sluice::audit
