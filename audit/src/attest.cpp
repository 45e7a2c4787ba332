// `sluice audit attest` / `verify-attestation`: SLSA provenance v1 for one execution as an
// in-toto Statement v1 in a DSSE envelope signed with the audit key; see evidence.hpp and
// docs/audit.md ("Attestations").
#include <fmt/format.h>

#include <set>
#include <utility>

#include "chain_rows.hpp"
#include "merkle.hpp"
#include "schema.hpp"
#include "sluice/audit/evidence.hpp"
#include "sluice/audit/reader.hpp"
#include "sluice/base/json.hpp"
#include "sqlite_db.hpp"

namespace sluice::audit {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
constexpr std::string_view kSlsaProvenance = "https://slsa.dev/provenance/v1";
constexpr std::string_view kBuildType = "urn:sluice:execution:v1";

/// scheme://host[:port]path of a request row: https inside an inspected tunnel (CONNECT),
/// http for a plain-HTTP origin connection; the scheme's default port is left out.
std::string requestUri(std::string_view kind, std::string_view host, std::int64_t port,
                       std::string_view path) {
  const bool tls = kind == "connect";
  std::string uri = fmt::format("{}://{}", tls ? "https" : "http", host);
  if (port > 0 && port != (tls ? 443 : 80)) uri += fmt::format(":{}", port);
  return uri + std::string(path.empty() ? "/" : path);
}

/// What one execution fetched, as resolved dependencies: each allowed request's method + URL
/// (first occurrence, chain order), then each allowed tunnel whose requests were not seen.
std::expected<Json, base::Error> fetchedUrls(const std::filesystem::path& db, sqlite3* raw,
                                             std::string_view execution_id) {
  auto st = detail::prepare(
      db, raw,
      "SELECT r.method, r.host, r.path, r.status,"
      " (SELECT c.kind FROM connections c WHERE c.id = r.connection_id LIMIT 1),"
      " (SELECT c.port FROM connections c WHERE c.id = r.connection_id LIMIT 1)"
      " FROM requests r WHERE r.execution_id = ?1 AND r.decision = 'allow' ORDER BY r.seq");
  if (!st) return std::unexpected(st.error());
  st->bindText(1, execution_id);
  Json deps = Json::array();
  std::set<std::pair<std::string, std::string>> seen;
  int rc;
  while ((rc = st->step()) == SQLITE_ROW) {
    std::string method(st->columnText(0));
    std::string uri =
        requestUri(st->columnText(4), st->columnText(1), st->columnInt(5), st->columnText(2));
    if (!seen.emplace(method, uri).second) continue;
    deps.push_back(
        {{"uri", uri}, {"annotations", {{"method", method}, {"status", st->columnInt(3)}}}});
  }
  if (rc != SQLITE_DONE)
    return std::unexpected(detail::sqliteError(db, raw, rc, "cannot read requests"));
  // Allowed connections whose requests sluice did not see (a passthrough TLS tunnel): the
  // origin it reached, without a path.
  auto tunnels =
      detail::prepare(db, raw,
                      "SELECT c.kind, c.host, c.port, c.tls, c.bytes_down FROM connections c"
                      " WHERE c.execution_id = ?1 AND c.decision = 'allow'"
                      " AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.execution_id = ?1"
                      " AND r.connection_id = c.id) ORDER BY c.seq");
  if (!tunnels) return std::unexpected(tunnels.error());
  tunnels->bindText(1, execution_id);
  while ((rc = tunnels->step()) == SQLITE_ROW) {
    std::string uri =
        requestUri(tunnels->columnText(0), tunnels->columnText(1), tunnels->columnInt(2), "");
    uri.pop_back();  // no path: only the origin is known
    if (!seen.emplace("", uri).second) continue;
    deps.push_back({{"uri", uri},
                    {"annotations",
                     {{"kind", "tunnel"},
                      {"tls", std::string(tunnels->columnText(3))},
                      {"bytes_in", tunnels->columnInt(4)}}}});
  }
  if (rc != SQLITE_DONE)
    return std::unexpected(detail::sqliteError(db, raw, rc, "cannot read connections"));
  return deps;
}

/// The executions row an attestation reads; the helpers below take their columns by index.
constexpr std::string_view kExecutionSelect =
    "SELECT seq, hash, workflow, policy_sha256, argv, started_at, ended_at, exit_code, artifacts, "
    "receipt FROM executions WHERE id = ?1";

/// The subjects: each /output artifact (the row's artifacts JSON) with a sha256 digest.
Json artifactSubjects(std::string_view artifacts_json) {
  Json artifacts = Json::parse(artifacts_json, nullptr, false);
  Json subjects = Json::array();
  if (!artifacts.is_array()) return subjects;
  for (const Json& a : artifacts) {
    if (!a.is_object() || !a.contains("path") || !a["path"].is_string() || !a.contains("sha256") ||
        !detail::isHexDigest(a["sha256"])) {
      continue;
    }
    subjects.push_back({{"name", a["path"]}, {"digest", {{"sha256", a["sha256"]}}}});
  }
  return subjects;
}

/// Resolved dependencies known from the row: its policy, then its inputs when the receipt lists
/// them: the path the program read (inside the sandbox) with the digest taken at run time; the
/// host path, and why a file has no digest, as annotations (an in-toto ResourceDescriptor's
/// free-form map).
Json policyAndInputs(const detail::Stmt& row) {
  Json deps = Json::array();
  if (!row.columnText(3).empty()) {
    deps.push_back({{"uri", fmt::format("urn:sluice:policy:{}", row.columnText(2))},
                    {"digest", {{"sha256", std::string(row.columnText(3))}}}});
  }
  Json receipt = Json::parse(row.columnText(9), nullptr, false);
  if (!receipt.is_object() || !receipt.contains("inputs") || !receipt["inputs"].is_array())
    return deps;
  for (const Json& in : receipt["inputs"]) {
    if (!in.is_object() || !in.contains("path") || !in["path"].is_string()) continue;
    Json dep = {{"uri", "file://" + in["path"].get<std::string>()}};
    if (in.contains("sha256") && detail::isHexDigest(in["sha256"]))
      dep["digest"] = {{"sha256", in["sha256"]}};
    Json notes = Json::object();
    for (const char* k : {"source", "error"})
      if (in.contains(k) && in[k].is_string()) notes[k] = in[k];
    if (!notes.empty()) dep["annotations"] = std::move(notes);
    deps.push_back(std::move(dep));
  }
  return deps;
}

/// The in-toto Statement with its SLSA provenance predicate.
Json provenance(const detail::Stmt& row, std::string_view execution_id, const SigningKey& key,
                Json subjects, Json deps) {
  Json argv = Json::parse(row.columnText(4), nullptr, false);
  Json statement = Json::object();
  statement["_type"] = kStatementType;
  statement["subject"] = std::move(subjects);
  statement["predicateType"] = kSlsaProvenance;
  statement["predicate"] = {
      {"buildDefinition",
       {{"buildType", kBuildType},
        {"externalParameters",
         {{"workflow", std::string(row.columnText(2))},
          {"argv", argv.is_discarded() ? Json::array() : argv}}},
        {"internalParameters", {{"policy_sha256", std::string(row.columnText(3))}}},
        {"resolvedDependencies", std::move(deps)}}},
      {"runDetails",
       {{"builder", {{"id", fmt::format("urn:sluice:audit-key:{}", key.keyId())}}},
        {"metadata",
         {{"invocationId", std::string(execution_id)},
          {"startedOn", formatTime(row.columnInt(5))},
          {"finishedOn", formatTime(row.columnInt(6))}}},
        {"byproducts",
         Json::array(
             {{{"name", "sluice-audit-row"},
               {"digest", {{"sha256", std::string(row.columnText(1))}}},
               {"annotations", {{"seq", row.columnInt(0)}, {"exit_code", row.columnInt(7)}}}}})}}}};
  return statement;
}

/// The DSSE envelope of `payload`, signed with `key`, as one line of JSON.
std::expected<std::string, base::Error> signedEnvelope(const std::string& payload,
                                                       const SigningKey& key) {
  const std::string sig = key.sign(dssePae(kInTotoPayloadType, payload));
  if (sig.empty())
    return std::unexpected(base::Error{base::Code::kInternal, "cannot sign the attestation"});
  Json envelope = Json::object();
  envelope["payloadType"] = kInTotoPayloadType;
  envelope["payload"] = base64Encode(payload);
  envelope["signatures"] = Json::array({{{"keyid", key.keyId()}, {"sig", base64Encode(sig)}}});
  return base::dumpJson(envelope) + "\n";
}

}  // namespace

std::string dssePae(std::string_view payload_type, std::string_view payload) {
  return fmt::format("DSSEv1 {} {} {} {}", payload_type.size(), payload_type, payload.size(),
                     payload);
}

std::expected<std::string, base::Error> attestExecution(const std::filesystem::path& db,
                                                        std::string_view execution_id,
                                                        const SigningKey& key) {
  auto conn = detail::openReadSnapshot(db);
  if (!conn) return std::unexpected(conn.error());
  sqlite3* raw = conn->get();

  auto row = detail::executionRow(db, raw, std::string(kExecutionSelect), execution_id);
  if (!row) return std::unexpected(row.error());
  Json subjects = artifactSubjects(row->columnText(8));
  if (subjects.empty()) {
    return std::unexpected(base::Error{
        base::Code::kNotFound,
        fmt::format("{}: execution {} left no /output artifacts with a digest; nothing to attest",
                    db.string(), execution_id)});
  }
  Json deps = policyAndInputs(*row);
  auto urls = fetchedUrls(db, raw, execution_id);
  if (!urls) return std::unexpected(urls.error());
  for (auto& u : *urls) deps.push_back(std::move(u));
  const std::string payload =
      base::dumpJson(provenance(*row, execution_id, key, std::move(subjects), std::move(deps)));
  return signedEnvelope(payload, key);
}

AttestationCheck verifyAttestation(std::string_view envelope_json, const PublicKey& key) {
  AttestationCheck out;
  auto reject = [&](std::string why) {
    out.ok = false;
    out.reason = std::move(why);
    return out;
  };
  Json env = Json::parse(envelope_json, nullptr, false);
  if (env.is_discarded() || !env.is_object()) return reject("not a JSON DSSE envelope");
  if (!env.contains("payloadType") || env["payloadType"] != kInTotoPayloadType)
    return reject(fmt::format("payloadType is not {}", kInTotoPayloadType));
  if (!env.contains("payload") || !env["payload"].is_string()) return reject("payload missing");
  auto payload = base64Decode(env["payload"].get<std::string>());
  if (!payload) return reject("payload is not base64");
  if (!env.contains("signatures") || !env["signatures"].is_array() || env["signatures"].empty())
    return reject("no signatures");
  const std::string pae = dssePae(kInTotoPayloadType, *payload);
  bool verified = false;
  std::string keyids;
  for (const Json& s : env["signatures"]) {
    if (!s.is_object() || !s.contains("sig") || !s["sig"].is_string()) continue;
    std::string keyid =
        s.contains("keyid") && s["keyid"].is_string() ? s["keyid"].get<std::string>() : "";
    keyids += (keyids.empty() ? "" : ", ") + (keyid.empty() ? std::string("(none)") : keyid);
    auto sig = base64Decode(s["sig"].get<std::string>());
    if (sig && (keyid.empty() || keyid == key.keyId()) && key.verify(pae, *sig)) verified = true;
  }
  if (!verified) {
    return reject(
        fmt::format("no signature by key {} verifies (signatures by: {})", key.keyId(), keyids));
  }
  Json st = Json::parse(*payload, nullptr, false);
  if (st.is_discarded() || !st.is_object()) return reject("the payload is not JSON");
  if (!st.contains("_type") || st["_type"] != kStatementType)
    return reject(fmt::format("_type is not {}", kStatementType));
  if (!st.contains("predicateType") || st["predicateType"] != kSlsaProvenance)
    return reject(fmt::format("predicateType is not {}", kSlsaProvenance));
  if (!st.contains("subject") || !st["subject"].is_array() || st["subject"].empty())
    return reject("no subjects");
  for (const Json& s : st["subject"]) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string() || !s.contains("digest") ||
        !s["digest"].is_object() || !s["digest"].contains("sha256") ||
        !detail::isHexDigest(s["digest"]["sha256"])) {
      return reject("a subject lacks a name or a sha256 digest");
    }
    out.subjects.emplace_back(s["name"].get<std::string>(),
                              s["digest"]["sha256"].get<std::string>());
  }
  out.statement_json = *payload;
  out.ok = true;
  return out;
}

}  // namespace sluice::audit
