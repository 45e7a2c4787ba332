// Audit evidence that leaves the box (issue 15): the export stream for a SIEM (and its
// verification from the stream alone), inclusion proofs of one execution's receipt against a
// signed checkpoint, and in-toto / SLSA provenance attestations in a DSSE envelope.
// Formats: docs/audit.md ("Export", "Inclusion proofs", "Attestations").
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {

// ---- Export --------------------------------------------------------------------------------

enum class ExportFormat { kJsonl, kCsv };

struct ExportOptions {
  ExportFormat format = ExportFormat::kJsonl;
  /// Only rows with seq > after_seq (resume after the last seq a consumer has).
  std::int64_t after_seq = 0;
  /// Start at the first row (in chain order) whose time is at or after this (epoch ms); every
  /// row after it follows, so the export stays one contiguous piece of the chain.
  std::optional<std::int64_t> since_ms;
};

struct ExportStats {
  std::uint64_t rows = 0;
  std::uint64_t checkpoints = 0;
  std::int64_t last_seq = 0;  // the seq to pass as --after-seq next time (after_seq if none)
};

/// Streams every chained table's rows in seq order, each checkpoint right after the row at its
/// position, to `out`. Constant memory: one cursor per table, one read transaction (a
/// consistent snapshot while writers go on).
std::expected<ExportStats, base::Error> exportChain(const std::filesystem::path& db,
                                                    const ExportOptions& options,
                                                    std::ostream& out);

struct ExportVerifyResult {
  bool ok = false;
  std::string first_broken;  // "line N (<table> seq S): why"
  std::uint64_t rows = 0;
  std::uint64_t checkpoints = 0;
  std::int64_t first_seq = 0;
  std::int64_t last_seq = 0;
  /// Merkle roots are recomputed only when the export starts at seq 1 (a resumed piece lacks
  /// the leaves before it); signatures are always checked when a key is given.
  bool roots_checked = false;
  std::int64_t last_signed_position = 0;
};

/// Verifies a JSONL export on its own: every row's hash from its columns, the links between
/// rows, each checkpoint's root (when the stream starts at seq 1) and, with `key`, every
/// checkpoint's signature. A piece that starts later is anchored at its first row's prev_hash.
ExportVerifyResult verifyExport(std::istream& in, const PublicKey* key);

// ---- Inclusion proofs ----------------------------------------------------------------------

/// The inclusion proof of execution `execution_id`'s row against the latest checkpoint, as
/// JSON text: the row (table, seq, prev_hash, hash, columns), leaf_index, tree_size,
/// audit_path and the checkpoint (seq, position, root, ts, key_id, signature).
std::expected<std::string, base::Error> proveExecution(const std::filesystem::path& db,
                                                       std::string_view execution_id);

struct ProofCheck {
  bool ok = false;
  std::string reason;  // why it was rejected
  std::string execution_id;
  std::int64_t seq = 0;
  std::int64_t position = 0;
};

/// Checks a proof without the database: the row's hash from its columns, the audit path to
/// the checkpoint's root, and the checkpoint's signature by `key`.
ProofCheck checkProof(std::string_view proof_json, const PublicKey& key);

// ---- Checkpoints kept off the box ----------------------------------------------------------

/// The newest checkpoint of `db` (by position) as one line of JSON, to keep off the box and
/// pass later to verify's `consistent_with`: {seq, position, root, ts, key_id, signature,
/// frontier}. nullopt when the database has no checkpoint. Its signature is not checked here.
std::expected<std::optional<std::string>, base::Error> latestCheckpointJson(
    const std::filesystem::path& db);

/// Checks a checkpoint's JSON (latestCheckpointJson's, or a proof's) on its own: signed by `key`,
/// and its frontier, when present, folding to its root. The error says what is wrong.
std::expected<void, std::string> checkCheckpointJson(std::string_view json, const PublicKey& key);

// ---- Attestations --------------------------------------------------------------------------

inline constexpr std::string_view kInTotoPayloadType = "application/vnd.in-toto+json";

/// DSSE's pre-authentication encoding: "DSSEv1 <len(type)> <type> <len(body)> <body>".
std::string dssePae(std::string_view payload_type, std::string_view payload);

/// An in-toto Statement v1 with an SLSA provenance v1 predicate for one execution (subjects:
/// its /output artifacts; resolved dependencies: its policy and the URLs its requests rows
/// show it fetched), in a DSSE envelope signed with `key`. JSON text.
std::expected<std::string, base::Error> attestExecution(const std::filesystem::path& db,
                                                        std::string_view execution_id,
                                                        const SigningKey& key);

struct AttestationCheck {
  bool ok = false;
  std::string reason;
  std::string statement_json;                                 // the verified payload
  std::vector<std::pair<std::string, std::string>> subjects;  // name, sha256
};

/// Checks a DSSE envelope: payload type, a signature by `key` over the PAE, and that the
/// payload is an in-toto Statement v1 with subjects carrying sha256 digests.
AttestationCheck verifyAttestation(std::string_view envelope_json, const PublicKey& key);

}  // namespace sluice::audit
