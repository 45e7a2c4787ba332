// `sluice audit prove|check-proof|checkpoint|export|verify-export|attest|verify-attestation`:
// evidence that leaves the box (issues 15, 21). Exit status: 0 ok; 1 a proof, export or
// attestation was rejected, or `checkpoint` found none; 2 error (bad arguments, unreadable
// files, no such execution).
#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "audit_db.hpp"
#include "sluice/audit/central.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/base/clock.hpp"

namespace sluice::cli {
namespace {

namespace audit = sluice::audit;

struct EvidenceArgs {
  std::string db, execution, pubkey, signing_key, file, since, format = "jsonl";
  std::int64_t after_seq = 0;
};

int fail(const std::string& message) {
  std::cerr << "sluice audit: " << message << "\n";
  return 2;
}

/// A whole file, or stdin for "-".
std::expected<std::string, std::string> slurp(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(path + ": cannot open");
  ss << in.rdbuf();
  return ss.str();
}

int runProve(const EvidenceArgs& a) {
  std::expected<std::string, base::Error> proof;
  auto central = centralTargetOf(a.db);
  if (!central) return fail(central.error().message);
  proof = *central ? audit::proveCentral(**central, a.execution)
                   : audit::proveExecution(a.db, a.execution);
  if (!proof) return fail(proof.error().message);
  std::cout << *proof;
  return 0;
}

int runCheckProof(const EvidenceArgs& a) {
  auto key = audit::PublicKey::load(a.pubkey);
  if (!key) return fail(key.error().message);
  auto text = slurp(a.file);
  if (!text) return fail(text.error());
  audit::ProofCheck c = audit::checkProof(*text, **key);
  if (!c.ok) {
    std::cout << a.file << ": REJECTED: " << c.reason << "\n";
    return 1;
  }
  std::cout << a.file << ": ok: execution " << c.execution_id << " (seq " << c.seq
            << ") is in the audit log signed at position " << c.position << " by key "
            << (*key)->keyId() << "\n";
  return 0;
}

int runCheckpoint(const EvidenceArgs& a, bool json) {
  auto cp = audit::latestCheckpointJson(a.db);
  if (!cp) return fail(cp.error().message);
  if (!*cp) {
    std::cerr << "sluice audit: " << a.db << ": no checkpoint yet (the log is unsigned)\n";
    return 1;
  }
  if (!a.pubkey.empty()) {
    auto key = audit::PublicKey::load(a.pubkey);
    if (!key) return fail(key.error().message);
    if (auto ok = audit::checkCheckpointJson(**cp, **key); !ok) {
      std::cerr << "sluice audit: " << a.db
                << ": the latest checkpoint is not one to keep: " << ok.error()
                << " (investigate with sluice audit verify --pubkey)\n";
      return 1;
    }
  }
  if (json) {
    std::cout << **cp << "\n";
    return 0;
  }
  auto j = nlohmann::json::parse(**cp);
  std::cout << "checkpoint seq " << j["seq"] << ": rows 1.." << j["position"] << ", root "
            << j["root"].get<std::string>() << ", key " << j["key_id"].get<std::string>() << ", ts "
            << j["ts"] << " (keep the --json form to check later with audit verify "
            << "--consistent-with)\n";
  return 0;
}

int runExport(const EvidenceArgs& a) {
  audit::ExportOptions o;
  o.format = a.format == "csv" ? audit::ExportFormat::kCsv : audit::ExportFormat::kJsonl;
  o.after_seq = a.after_seq;
  if (!a.since.empty()) {
    auto now = base::nowMs();
    auto t = audit::parseTime(a.since, now);
    if (!t) return fail("--since: " + t.error().message);
    o.since_ms = *t;
  }
  std::ios::sync_with_stdio(false);
  std::expected<audit::ExportStats, base::Error> stats;
  auto central = centralTargetOf(a.db);
  if (!central) return fail(central.error().message);
  stats = *central ? audit::exportCentral(**central, o, std::cout)
                   : audit::exportChain(a.db, o, std::cout);
  if (!stats) return fail(stats.error().message);
  std::cerr << "sluice audit export: " << stats->rows << " rows, " << stats->checkpoints
            << " checkpoints; next time: --after-seq " << stats->last_seq << "\n";
  return 0;
}

int runVerifyExport(const EvidenceArgs& a) {
  std::shared_ptr<const audit::PublicKey> key;
  if (!a.pubkey.empty()) {
    auto k = audit::PublicKey::load(a.pubkey);
    if (!k) return fail(k.error().message);
    key = *k;
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  if (a.file != "-") {
    file.open(a.file, std::ios::binary);
    if (!file) return fail(a.file + ": cannot open");
    in = &file;
  }
  audit::ExportVerifyResult r = audit::verifyExport(*in, key.get());
  if (!r.ok) {
    std::cout << a.file << ": BROKEN after " << r.rows << " good rows: " << r.first_broken << "\n";
    return 1;
  }
  std::cout << a.file << ": ok, rows " << r.first_seq << ".." << r.last_seq << " (" << r.rows
            << "), " << r.checkpoints << " checkpoints"
            << (r.roots_checked ? "" : " (roots not recomputed: the export starts after seq 1)")
            << (key ? "; last signed position " + std::to_string(r.last_signed_position) : "")
            << "\n";
  return 0;
}

int runAttest(const EvidenceArgs& a) {
  auto key = audit::SigningKey::load(a.signing_key);
  if (!key) return fail(key.error().message);
  auto envelope = audit::attestExecution(a.db, a.execution, **key);
  if (!envelope) return fail(envelope.error().message);
  std::cout << *envelope;
  return 0;
}

int runVerifyAttestation(const EvidenceArgs& a) {
  auto key = audit::PublicKey::load(a.pubkey);
  if (!key) return fail(key.error().message);
  auto text = slurp(a.file);
  if (!text) return fail(text.error());
  audit::AttestationCheck c = audit::verifyAttestation(*text, **key);
  if (!c.ok) {
    std::cout << a.file << ": REJECTED: " << c.reason << "\n";
    return 1;
  }
  std::cout << a.file << ": ok, signed by key " << (*key)->keyId() << "\n";
  for (const auto& [name, sha] : c.subjects) std::cout << "  " << name << " sha256:" << sha << "\n";
  return 0;
}

}  // namespace

void addAuditEvidenceCommands(CLI::App& audit_cmd, int& exit_code) {
  auto args = std::make_shared<EvidenceArgs>();

  CLI::App* prove = audit_cmd.add_subcommand(
      "prove", "Inclusion proof (JSON) of one execution's receipt against the latest checkpoint");
  prove->add_option("--db", args->db, "Audit database, or postgresql://...?node=ID")->required();
  prove->add_option("--execution", args->execution, "Execution id")->required();
  prove->callback([args, &exit_code] { exit_code = runProve(*args); });

  CLI::App* check = audit_cmd.add_subcommand(
      "check-proof", "Verify an inclusion proof without the database: exit 0 ok, 1 rejected");
  check->add_option("--pubkey", args->pubkey, "The audit public key (audit.pub)")->required();
  check->add_option("proof", args->file, "Proof file (- for stdin)")->required();
  check->callback([args, &exit_code] { exit_code = runCheckProof(*args); });

  auto json = std::make_shared<bool>(false);
  CLI::App* checkpoint = audit_cmd.add_subcommand(
      "checkpoint", "The latest signed checkpoint, to keep off the box: exit 0, 1 when none");
  checkpoint->add_option("--db", args->db, "Audit database")->required();
  checkpoint->add_flag("--json", *json, "One line of JSON (for verify --consistent-with)");
  checkpoint->add_option("--pubkey", args->pubkey,
                         "Print it only if signed by this key (audit.pub): exit 1 otherwise");
  checkpoint->callback([args, json, &exit_code] { exit_code = runCheckpoint(*args, *json); });

  CLI::App* exp = audit_cmd.add_subcommand(
      "export", "Stream every chained row and checkpoint in chain order (for a SIEM)");
  exp->add_option("--db", args->db, "Audit database, or postgresql://...?node=ID")->required();
  exp->add_option("--since", args->since,
                  "Start at the first row at or after this time (RFC 3339, or 1h, 7d, ... ago)");
  exp->add_option("--after-seq", args->after_seq, "Resume after this seq")
      ->check(CLI::NonNegativeNumber);
  exp->add_option("--format", args->format, "jsonl | csv")->check(CLI::IsMember({"jsonl", "csv"}));
  exp->callback([args, &exit_code] { exit_code = runExport(*args); });

  CLI::App* vexp = audit_cmd.add_subcommand(
      "verify-export", "Re-verify the chain (and signatures) from a JSONL export alone");
  vexp->add_option("--pubkey", args->pubkey, "Also check checkpoint signatures with this key");
  vexp->add_option("file", args->file, "Export file (- for stdin)")->required();
  vexp->callback([args, &exit_code] { exit_code = runVerifyExport(*args); });

  CLI::App* attest = audit_cmd.add_subcommand(
      "attest", "SLSA provenance (in-toto Statement, DSSE envelope) for one execution's outputs");
  attest->add_option("--db", args->db, "Audit database")->required();
  attest->add_option("--execution", args->execution, "Execution id")->required();
  attest->add_option("--signing-key", args->signing_key, "Private key (audit.key, 0600)")
      ->required();
  attest->callback([args, &exit_code] { exit_code = runAttest(*args); });

  CLI::App* vatt = audit_cmd.add_subcommand(
      "verify-attestation",
      "Check an attestation's signature and statement: exit 0 ok, 1 rejected");
  vatt->add_option("--pubkey", args->pubkey, "The audit public key (audit.pub)")->required();
  vatt->add_option("attestation", args->file, "DSSE envelope file (- for stdin)")->required();
  vatt->callback([args, &exit_code] { exit_code = runVerifyAttestation(*args); });
}

}  // namespace sluice::cli
