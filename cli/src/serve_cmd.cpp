// `sluice serve`: the resident daemon (serve/; docs/serve.md). SIGHUP reloads the policy
// directory; SIGTERM/SIGINT drain (503 to new work, executions finish up to --drain, then are
// stopped; every receipt is stored) and exit 0.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/serve/server.hpp"

namespace sluice::cli {
namespace {

struct ServeArgs {
  serve::ServeOptions options;
  std::string drain = "30s";
};

int runServe(ServeArgs& args) {
  sigset_t set = blockDaemonSignals();
  auto drain = policy::parseDuration(args.drain);
  if (!drain) {
    std::fprintf(stderr, "sluice serve: --drain %s: %s\n", args.drain.c_str(),
                 drain.error().c_str());
    return 2;
  }
  args.options.drain = *drain;
  // First, while single-threaded and holding no policy, secret or key.
  args.options.zygote = startZygote("serve");
  if (!args.options.zygote) return 1;
  auto server = serve::Server::create(args.options);
  if (!server) {
    std::fprintf(stderr, "sluice serve: %s\n", server.error().c_str());
    return 1;
  }
  if (auto r = (*server)->start(); !r) {
    std::fprintf(stderr, "sluice serve: %s\n", r.error().c_str());
    return 1;
  }
  for (const auto& e : (*server)->endpoints()) spdlog::info("sluice serve listening on {}", e);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      if (auto r = (*server)->reload(); !r)
        spdlog::error("policy reload rejected, keeping the policy in force:\n{}", r.error());
      else
        spdlog::info("policy reloaded from {}", args.options.policy_dir);
      continue;
    }
    spdlog::info("signal {}: draining", sig);
    break;
  }
  (*server)->drain();
  return 0;
}

}  // namespace

void addServeCommands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Run the sluice API daemon (sessions, runs, metrics)");
  auto& o = args->options;
  cmd->add_option("--policy-dir", o.policy_dir, "Directory of workflow policy files")->required();
  cmd->add_option("--listen", o.listens,
                  "unix:PATH or HOST:PORT (repeatable; default unix:/run/sluice/sluice.sock)");
  cmd->add_option("--audit", o.audit_db, "Audit database (default /var/lib/sluice/audit.db)");
  cmd->add_option("--signing-key", o.signing_key,
                  "Sign audit checkpoints with this Ed25519 key (sluice audit keygen; 0600)");
  cmd->add_option("--secrets", o.secrets, "Secret store file (mode 0600)");
  cmd->add_option("--ca-dir", o.ca_dir, "CA directory for tls: inspect rules (sluice ca init)");
  cmd->add_option("--upstream-ca", o.upstream_cas, "Extra CA file for inspected upstreams");
  cmd->add_option("--token-file", o.token_file,
                  "Bearer tokens for TCP callers: lines NAME TOKEN [approver] (mode 0600)");
  cmd->add_option("--pool", o.pool, "Prepared sandboxes kept per workflow");
  cmd->add_option("--max-sessions", o.max_sessions, "Sessions open at once (default 64)");
  cmd->add_option("--drain", args->drain, "How long SIGTERM lets executions finish (30s)");
  cmd->add_option("--approver-uid", o.approver_uids, "Uid that may answer approvals");
  cmd->callback([args, &exit_code] { exit_code = runServe(*args); });
}

}  // namespace sluice::cli
