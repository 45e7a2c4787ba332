// `sluice session policy ID --policy FILE`: a live update of a running `sluice serve` session's
// policy (PUT /v1/sessions/{id}/policy), over its Unix socket or over TCP with a bearer token.
// Exit 0 swapped (the new generation is printed), 1 an invalid policy (checked here first: its
// diagnostics as FILE:LINE:COL) or refused by the server (widening without being an approver,
// no such session: its error is printed), 2 cannot read the file or reach the server.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "sluice/base/strict_json.hpp"
#include "sluice/policy/loader.hpp"

namespace sluice::cli {

namespace {

struct SessionOptions {
  std::string connect = "unix:/run/sluice/sluice.sock";
  std::string token;  // --token, else $SLUICE_TOKEN
  std::string id;
  std::string policy_file;
  bool json = false;
};

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
  if (r->status != 200) {
    std::cerr << "sluice session policy: " << r->status << " ";
    if (j && j->is_object() && j->contains("error"))
      std::cerr << (*j)["error"].get<std::string>() << "\n";
    else
      std::cerr << r->body << "\n";
    return 1;
  }
  if (!j) {
    std::cerr << "sluice session policy: the server's answer is not JSON\n";
    return 2;
  }
  if (o.json)
    std::cout << j->dump() << "\n";
  else
    std::cout << "session " << o.id << ": policy " << (*j)["policy_sha256"].get<std::string>()
              << " in force as generation " << (*j)["generation"].dump() << "\n";
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
