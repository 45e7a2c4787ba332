// `sluice audit query|verify|sql|show|keygen`: read-only views of the audit store for auditors,
// and the signing key pair.
// Exit status: 0 ok; 1 verify found a broken chain (or, with --pubkey, an unsigned log, an
// unsigned tail under --require-signed-tail, a history not extending --consistent-with) / show
// found no such execution; 2 error (also a kept checkpoint that is malformed or not signed).
#include <grp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "audit_db.hpp"
#include "commands.hpp"
#include "sluice/audit/central.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/json.hpp"

namespace sluice::cli {
namespace {

namespace audit = sluice::audit;

struct AuditArgs {
  std::string db;
  std::string format = "table";
  std::string workflow, execution, decision, host, since, until, kind;
  bool shadow_diff = false;  // --shadow-diff
  std::int64_t limit = -1;
  std::string sql;
  std::string execution_id;
  std::string pubkey, out_dir;
  bool require_signed_tail = false;
  std::string consistent_with;
};

int fail(const std::string& message) {
  std::cerr << "sluice audit: " << message << "\n";
  return 2;
}

/// The store `db` names: a SQLite file, or a node's rows in the central PostgreSQL store
/// (every node's when `node_required` is false: audit sql).
std::expected<std::unique_ptr<audit::Reader>, base::Error> openReader(const std::string& db,
                                                                      bool node_required) {
  auto central = centralTargetOf(db, node_required);
  if (!central) return std::unexpected(central.error());
  return *central ? audit::openCentralReader(**central) : audit::Reader::open(db);
}

/// How messages name `db`: a postgresql:// URI may hold a password, so only its node.
std::string shownDb(const std::string& db) {
  if (!audit::isPostgresUri(db)) return db;
  auto target = audit::parseCentralUri(db, false);
  return "postgresql node " + (target ? target->node : std::string("?"));
}

int runQuery(const AuditArgs& a) {
  auto format = audit::parseFormat(a.format);
  if (!format) return fail(format.error().message);
  audit::QueryFilter f;
  f.kind = a.kind;
  if (a.shadow_diff) {
    if (!a.kind.empty()) return fail("--shadow-diff lists rows of every kind; drop --kind");
    f.kind = "shadow-diff";
  }
  if (!a.workflow.empty()) f.workflow = a.workflow;
  if (!a.execution.empty()) f.execution = a.execution;
  if (!a.decision.empty()) f.decision = a.decision;
  if (!a.host.empty()) f.host = a.host;
  std::int64_t now = base::nowMs();
  if (!a.since.empty()) {
    auto t = audit::parseTime(a.since, now);
    if (!t) return fail("--since: " + t.error().message);
    f.since_ms = *t;
  }
  if (!a.until.empty()) {
    auto t = audit::parseTime(a.until, now);
    if (!t) return fail("--until: " + t.error().message);
    f.until_ms = *t;
  }
  if (a.limit >= 0) f.limit = a.limit;
  auto reader = openReader(a.db, true);
  if (!reader) return fail(reader.error().message);
  auto table = (*reader)->query(f);
  if (!table) return fail(table.error().message);
  std::cout << audit::formatResult(*table, *format);
  return 0;
}

/// How a failed verify leads its line: a broken chain, or a log that is not (all) signed or
/// does not extend the kept checkpoint.
std::string failureWord(audit::VerifyFailure f) {
  switch (f) {
    case audit::VerifyFailure::kUnsigned:
      return "UNSIGNED";
    case audit::VerifyFailure::kUnsignedTail:
      return "UNSIGNED TAIL";
    case audit::VerifyFailure::kRewritten:
      return "REWRITTEN";
    default:
      return "BROKEN";
  }
}

int runVerify(const AuditArgs& a) {
  audit::VerifyOptions o;
  std::shared_ptr<const audit::PublicKey> key;
  if (!a.pubkey.empty()) {
    auto k = audit::PublicKey::load(a.pubkey);
    if (!k) return fail(k.error().message);
    key = *k;
    o.pubkey = key.get();
  }
  o.require_signed_tail = a.require_signed_tail;
  if (!a.consistent_with.empty()) {
    std::ifstream in(a.consistent_with, std::ios::binary);
    if (!in) return fail(a.consistent_with + ": cannot open");
    o.consistent_with = std::string(std::istreambuf_iterator<char>(in), {});
    o.consistent_with_name = a.consistent_with;
  }
  const std::string shown = shownDb(a.db);
  std::expected<audit::VerifyResult, base::Error> result;
  auto central = centralTargetOf(a.db);
  if (!central) return fail(central.error().message);
  result = *central ? audit::verifyCentral(**central, o) : audit::verify(a.db, o);
  if (!result) return fail(result.error().message);
  if (result->wal_missing) {
    std::cerr << "sluice audit: warning: " << a.db << " is in WAL mode but " << a.db
              << "-wal is missing: a copy taken without it "
              << "lacks the rows not yet copied into the main file (copy both, or use "
                 "sqlite3 DB .backup)\n";
  }
  if (!result->ok) {
    std::cout << shown << ": " << failureWord(result->failure);
    if (result->failure == audit::VerifyFailure::kBroken)
      std::cout << " after " << result->rows << " good rows";
    std::cout << ": " << result->first_broken << "\n";
    return 1;
  }
  std::cout << shown << ": ok, " << result->rows << " rows verified";
  if (result->checkpoints > 0 || key) {
    std::cout << ", " << result->checkpoints << " checkpoints"
              << (key ? " (signatures valid, key " + key->keyId() + ")" : " (roots only)");
  }
  std::cout << "\n";
  if (key) {
    std::cout << "last signed position: " << result->last_signed_position
              << "; unsigned tail: " << result->unsigned_tail << " rows\n";
  }
  if (o.consistent_with)
    std::cout << "extends the checkpoint kept in " << a.consistent_with << "\n";
  return 0;
}

int runSql(const AuditArgs& a) {
  auto format = audit::parseFormat(a.format);
  if (!format) return fail(format.error().message);
  auto reader = openReader(a.db, false);
  if (!reader) return fail(reader.error().message);
  auto table = (*reader)->sql(a.sql);
  if (!table) return fail(table.error().message);
  std::cout << audit::formatResult(*table, *format);
  return 0;
}

int runShow(const AuditArgs& a) {
  auto format = audit::parseFormat(a.format);
  if (!format) return fail(format.error().message);
  auto reader = openReader(a.db, true);
  if (!reader) return fail(reader.error().message);
  auto detail = (*reader)->show(a.execution_id);
  if (!detail) return fail(detail.error().message);
  if (!*detail) {
    std::cerr << "sluice audit: " << shownDb(a.db) << ": no execution with id '" << a.execution_id
              << "'\n";
    return 1;
  }
  const audit::ExecutionDetail& d = **detail;
  auto receipt = nlohmann::ordered_json::parse(d.receipt_json, nullptr, false);
  if (*format == audit::OutputFormat::kJson) {
    nlohmann::ordered_json out;
    auto row = nlohmann::ordered_json::parse(audit::formatResult(d.execution, *format));
    out["execution"] = row.empty() ? nlohmann::ordered_json::object() : row[0];
    out["receipt"] = receipt.is_discarded() ? nlohmann::ordered_json(d.receipt_json) : receipt;
    out["connections"] = nlohmann::ordered_json::parse(audit::formatResult(d.connections, *format));
    out["requests"] = nlohmann::ordered_json::parse(audit::formatResult(d.requests, *format));
    std::cout << base::dumpJson(out, 2) << "\n";
    return 0;
  }
  if (*format == audit::OutputFormat::kCsv) {
    return fail("show supports --format table or json (use query --format csv for tables)");
  }
  // One execution: a vertical "column: value" list reads better than one very wide row.
  std::cout << "Execution " << a.execution_id << "\n";
  const auto& cols = d.execution.columns;
  std::size_t width = 0;
  for (const auto& c : cols) width = std::max(width, c.size());
  for (std::size_t i = 0; i < cols.size() && !d.execution.rows.empty(); ++i) {
    const audit::Cell& cell = d.execution.rows[0][i];
    std::string value;
    if (auto* n = std::get_if<std::int64_t>(&cell)) value = std::to_string(*n);
    if (auto* t = std::get_if<std::string>(&cell)) value = *t;
    std::cout << "  " << cols[i] << ":" << std::string(width - cols[i].size() + 1, ' ') << value
              << "\n";
  }
  std::cout << "\nReceipt\n"
            << (receipt.is_discarded() ? d.receipt_json : base::dumpJson(receipt, 2)) << "\n";
  std::cout << "\nConnections (" << d.connections.rows.size() << ")\n"
            << audit::formatResult(d.connections, *format);
  std::cout << "\nRequests (" << d.requests.rows.size() << ")\n"
            << audit::formatResult(d.requests, *format);
  return 0;
}

int runKeygen(const AuditArgs& a) {
  auto id = audit::generateKeyFiles(a.out_dir);
  if (!id) return fail(id.error().message);
  const std::filesystem::path dir(a.out_dir);
  std::cout << "wrote " << (dir / "audit.key").string() << " (private, 0600) and "
            << (dir / "audit.pub").string() << "\nkey id " << *id << "\n";
  return 0;
}

}  // namespace

// prove, check-proof, export, verify-export, attest, verify-attestation (audit_evidence_cmd.cpp).
void addAuditEvidenceCommands(CLI::App& audit_cmd, int& exit_code);
// ship (audit_ship_cmd.cpp).
void addAuditShipCommand(CLI::App& audit_cmd, int& exit_code);

std::expected<int, std::string> groupId(const std::string& name) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || !found)
    return std::unexpected("--audit-group " + name + ": no such group");
  return static_cast<int>(found->gr_gid);
}

void addAuditCommands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AuditArgs>();
  CLI::App* audit_cmd = app.add_subcommand("audit", "Query and verify the audit store");
  audit_cmd->require_subcommand(1);
  const auto formats = CLI::IsMember({"table", "json", "csv"});

  CLI::App* query = audit_cmd->add_subcommand(
      "query", "Executions with their connection summaries, or connections and requests");
  query
      ->add_option("--db", args->db,
                   "Audit database, or postgresql://...?node=ID: that node's rows in the central "
                   "store (audit ship)")
      ->required();
  query->add_option("--workflow", args->workflow, "Only this workflow");
  query->add_option("--execution", args->execution, "Only this execution id");
  query
      ->add_option("--decision", args->decision,
                   "Only allowed, denied or failed events (allow | deny | fail)")
      ->check(CLI::IsMember({"allow", "deny", "fail"}));
  query->add_option("--host", args->host, "Only connections/requests to this host");
  query->add_option("--since", args->since, "From this time (RFC 3339, or 1h, 7d, ... ago)");
  query->add_option("--until", args->until, "Before this time (RFC 3339, or 1h, 7d, ... ago)");
  query->add_option("--limit", args->limit, "At most N rows")->check(CLI::NonNegativeNumber);
  query
      ->add_option("--kind", args->kind,
                   "executions | connections | requests | forwards | dns | approvals | events "
                   "(default: events when --decision or --host is given, else executions)")
      ->check(CLI::IsMember(
          {"executions", "connections", "requests", "forwards", "dns", "approvals", "events"}));
  query->add_flag("--shadow-diff", args->shadow_diff,
                  "Only rows where the --shadow-policy decision differs from the decision");
  query->add_option("--format", args->format, "table | json | csv")->check(formats);
  query->callback([args, &exit_code] { exit_code = runQuery(*args); });

  CLI::App* verify = audit_cmd->add_subcommand(
      "verify", "Walk the hash chain: exit 0 intact, 1 naming the first broken row");
  verify
      ->add_option("--db", args->db,
                   "Audit database, or postgresql://...?node=ID: that node's rows in the central "
                   "store (audit ship)")
      ->required();
  CLI::Option* pubkey = verify->add_option(
      "--pubkey", args->pubkey,
      "Check every checkpoint's signature with this public key (audit.pub); a log with no "
      "checkpoint then fails as unsigned");
  verify
      ->add_flag("--require-signed-tail", args->require_signed_tail,
                 "Fail when rows after the last signed checkpoint exist")
      ->needs(pubkey);
  verify
      ->add_option("--consistent-with", args->consistent_with,
                   "A checkpoint kept earlier (audit checkpoint --json): fail unless the log "
                   "extends it")
      ->needs(pubkey);
  verify->callback([args, &exit_code] { exit_code = runVerify(*args); });

  CLI::App* keygen = audit_cmd->add_subcommand(
      "keygen", "Make an Ed25519 signing key pair: DIR/audit.key (0600) and DIR/audit.pub");
  keygen->add_option("--out", args->out_dir, "Directory for the key files")->required();
  keygen->callback([args, &exit_code] { exit_code = runKeygen(*args); });

  addAuditEvidenceCommands(*audit_cmd, exit_code);
  addAuditShipCommand(*audit_cmd, exit_code);

  CLI::App* sql = audit_cmd->add_subcommand("sql", "Run one read-only SQL statement");
  sql->add_option("--db", args->db, "Audit database, or postgresql://... (the central store)")
      ->required();
  sql->add_option("--format", args->format, "table | json | csv")->check(formats);
  sql->add_option("statement", args->sql, "SELECT ...")->required();
  sql->callback([args, &exit_code] { exit_code = runSql(*args); });

  CLI::App* show = audit_cmd->add_subcommand(
      "show", "One execution's receipt and every connection and request it made");
  show->add_option("--db", args->db, "Audit database, or postgresql://...?node=ID")->required();
  show->add_option("--format", args->format, "table | json")->check(formats);
  show->add_option("execution_id", args->execution_id, "Execution id")->required();
  show->callback([args, &exit_code] { exit_code = runShow(*args); });
}

std::expected<std::optional<audit::CentralTarget>, base::Error> centralTargetOf(
    const std::string& db, bool node_required) {
  if (!audit::isPostgresUri(db)) return std::nullopt;
  warnPasswordInUri(db);
  auto target = audit::parseCentralUri(db, node_required);
  if (!target) return std::unexpected(target.error());
  return std::optional<audit::CentralTarget>(std::move(*target));
}

void warnPasswordInUri(const std::string& uri) {
  static bool warned = false;
  if (warned || !audit::conninfoHoldsSecret(uri)) return;
  warned = true;
  std::cerr << "sluice audit: warning: the postgresql:// URI holds a password, which every "
               "local user can read in this command line (ps, /proc/PID/cmdline): put it in "
               "PGPASSWORD or ~/.pgpass instead\n";
}

}  // namespace sluice::cli
