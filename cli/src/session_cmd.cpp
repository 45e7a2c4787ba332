// `sluice session policy ID --policy FILE`: a live update of a running `sluice serve` session's
// policy (PUT /v1/sessions/{id}/policy), over its Unix socket or over TCP with a bearer token.
// Exit 0 swapped (the new generation is printed), 1 an invalid policy (checked here first: its
// diagnostics as FILE:LINE:COL) or refused by the server (widening without being an approver,
// no such session: its error is printed), 2 cannot read the file or reach the server.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "sluice/base/strict_json.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/proxy/approvals.hpp"

namespace sluice::cli {

namespace {

struct SessionOptions {
  std::string connect = "unix:/run/sluice/sluice.sock";
  std::string token;  // --token, else $SLUICE_TOKEN
  std::string id;
  std::string policy_file;
  bool json = false;
};

/// `key` of a JSON object when it is a string, else "".
std::string stringField(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int runPolicy(const SessionOptions& o) {
  std::ifstream in(o.policy_file, std::ios::binary);
  if (!in) {
    std::cerr << "sluice session policy: cannot read " << o.policy_file << "\n";
    return 2;
  }
  std::ostringstream yaml;
  yaml << in.rdbuf();
  // Checked here first, as `policy check` would: its diagnostics name the user's file
  // (FILE:LINE:COL), not the server's copy of the body.
  if (auto w = policy::parseWorkflow(yaml.str(), o.policy_file); !w) {
    std::cerr << "sluice session policy: the policy is not valid:\n" << w.error().str();
    return 1;
  }
  auto r = callServe(o.connect, o.token, "PUT", "/v1/sessions/" + o.id + "/policy",
                     "application/yaml", yaml.str());
  if (!r) {
    std::cerr << "sluice session policy: " << r.error() << "\n";
    return 2;
  }
  auto j = base::parseStrictJson(r->body);
  const nlohmann::json answer = j && j->is_object() ? *j : nlohmann::json::object();
  if (r->status != 200) {
    const std::string error = stringField(answer, "error");
    // Escaped and cut: the daemon's words reach the user's terminal.
    std::cerr << "sluice session policy: " << r->status << " "
              << proxy::displayText(error.empty() ? r->body : error, 400) << "\n";
    return 1;
  }
  // The daemon's answer is read as untrusted input: a malformed one is an error, not a throw.
  const std::string sha = stringField(answer, "policy_sha256");
  const auto generation = answer.find("generation");
  if (sha.empty() || generation == answer.end() || !generation->is_number_unsigned()) {
    std::cerr << "sluice session policy: the server's answer is not a policy update "
                 "(policy_sha256, generation)\n";
    return 2;
  }
  if (o.json)
    std::cout << answer.dump() << "\n";
  else
    std::cout << "session " << o.id << ": policy " << sha << " in force as generation "
              << generation->get<std::uint64_t>() << "\n";
  return 0;
}

}  // namespace

void addSessionCommands(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SessionOptions>();
  auto* cmd = app.add_subcommand("session", "Act on a session of a running sluice serve");
  cmd->require_subcommand(1);
  auto* policy = cmd->add_subcommand(
      "policy",
      "Replace a session's policy live (a new generation); only an approver may widen it");
  policy->add_option("id", o->id, "The session's id")->required();
  policy->add_option("--policy", o->policy_file, "The workflow YAML (the session's workflow)")
      ->required();
  policy->add_option("--connect", o->connect,
                     "unix:PATH (default unix:/run/sluice/sluice.sock) or http://HOST:PORT");
  policy->add_option("--token", o->token, "Bearer token for a TCP listener (or $SLUICE_TOKEN)");
  policy->add_flag("--json", o->json, "Print the server's JSON");
  policy->callback([o, &exit_code] { exit_code = runPolicy(*o); });
}

}  // namespace sluice::cli
