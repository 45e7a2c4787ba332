// The replay report as text for a person and as JSON for a CI gate
// (schemas/replay.v1.schema.json).
#include <nlohmann/json.hpp>
#include <sstream>

#include "sluice/audit/event_text.hpp"
#include "sluice/base/json.hpp"
#include "sluice/replay/replay.hpp"

namespace sluice::replay {

namespace {

std::string sideText(const Side& s) {
  std::string t(audit::textOf(s.verdict));
  if (!s.rule.empty()) t += " by " + s.rule;
  if (!s.reason.empty() && s.reason != policy::reasonName(policy::Reason::kAllowed))
    t += " (" + s.reason + ")";
  return t;
}

// "GET localhost:8080/v1/items/7", "CONNECT example.com:443", "DNS example.com".
std::string subject(const Difference& d) {
  if (d.kind == "dns") return "DNS " + d.host;
  if (d.kind == "connection") return "CONNECT " + d.host + ":" + std::to_string(d.port);
  return d.method + " " + d.host + ":" + std::to_string(d.port) + d.path;
}

// "request 57 (execution e1, connection c-e1-2)".
std::string identity(const Difference& d) {
  std::string id = d.kind;
  if (d.kind == "connection") id += " " + d.connection_id;
  if (d.kind != "connection") id += " " + std::to_string(d.seq);
  std::string in;
  if (!d.execution_id.empty()) in += "execution " + d.execution_id;
  if (d.kind == "request" && !d.connection_id.empty())
    in += (in.empty() ? "" : ", ") + std::string("connection ") + d.connection_id;
  return in.empty() ? id : id + " (" + in + ")";
}

nlohmann::json sideJson(const Side& s) {
  return {{"decision", audit::textOf(s.verdict)},
          {"rule", s.rule.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.rule)},
          {"reason", s.reason}};
}

nlohmann::json differenceJson(const Difference& d) {
  nlohmann::json j = {{"change", d.change},
                      {"kind", d.kind},
                      {"seq", d.seq},
                      {"execution_id", d.execution_id.empty() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(d.execution_id)},
                      {"host", d.host},
                      {"before", sideJson(d.before)},
                      {"after", sideJson(d.after)},
                      {"detail", d.detail},
                      {"nearest_miss", d.nearest_miss}};
  if (d.kind != "dns") {
    j["connection_id"] = d.connection_id;
    j["port"] = d.port;
  }
  if (d.kind == "request") {
    j["request_seq"] = d.seq;
    j["method"] = d.method;
    j["path"] = d.path;
  }
  if (!d.note.empty()) j["note"] = d.note;
  return j;
}

}  // namespace

std::string replayText(const ReplayReport& report) {
  std::ostringstream out;
  for (const auto& d : report.differences) {
    out << d.change << "  " << identity(d) << ": " << subject(d) << "\n"
        << "    was " << sideText(d.before) << ", now " << sideText(d.after) << "\n";
    if (!d.detail.empty()) out << "    reason: " << d.detail << "\n";
    // A default deny's detail already quotes its nearest miss.
    if (!d.nearest_miss.empty() && d.detail.find(d.nearest_miss) == std::string::npos)
      out << "    nearest miss: " << d.nearest_miss << "\n";
    if (!d.note.empty()) out << "    note: " << d.note << "\n";
  }
  const auto& n = report.counts;
  out << "replayed " << n.connections + n.requests + n.dns << " rows (" << n.connections
      << " connections, " << n.requests << " requests, " << n.dns << " dns): " << n.changed()
      << " changed (" << n.allow_to_deny << " allow->deny, " << n.deny_to_allow << " deny->allow, "
      << n.ask_changes << " ask, " << n.rule_changes << " rule), " << n.unchanged << " unchanged; "
      << n.not_compared << " not compared\n";
  return out.str();
}

std::string replayJson(const ReplayReport& report, const policy::Workflow& candidate) {
  nlohmann::json diffs = nlohmann::json::array();
  for (const auto& d : report.differences) diffs.push_back(differenceJson(d));
  const auto& n = report.counts;
  nlohmann::json j = {{"version", 1},
                      {"candidate", {{"workflow", candidate.name}, {"sha256", candidate.sha256}}},
                      {"changed", n.changed() > 0},
                      {"differences", diffs},
                      {"counts",
                       {{"connections", n.connections},
                        {"requests", n.requests},
                        {"dns", n.dns},
                        {"unchanged", n.unchanged},
                        {"allow_to_deny", n.allow_to_deny},
                        {"deny_to_allow", n.deny_to_allow},
                        {"ask_changes", n.ask_changes},
                        {"rule_changes", n.rule_changes},
                        {"not_compared", n.not_compared}}}};
  return base::dumpJson(j) + "\n";
}

}  // namespace sluice::replay
