// `sluice serve`: the resident daemon (serve/; docs/serve.md). SIGHUP reloads the policy
// directory; SIGTERM/SIGINT drain (503 to new work, executions finish up to --drain, then are
// stopped; every receipt is stored) and exit 0.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "commands.hpp"
#include "sluice/base/log.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/serve/server.hpp"
#include "sluice/serve/systemd.hpp"

namespace sluice::cli {
namespace {

struct ServeArgs {
  serve::ServeOptions options;
  std::string drain = "30s";
  std::string max_session_ttl = "24h";
  std::string header_timeout = "10s";
  std::string log_format = "auto";
  std::string otlp_interval = "10s";
};

// The duration options, parsed; false (with the message printed) on a bad one.
bool parseDurations(ServeArgs& args) {
  for (auto [flag, text, out] :
       {std::tuple{"--drain", &args.drain, &args.options.drain},
        std::tuple{"--max-session-ttl", &args.max_session_ttl, &args.options.max_session_ttl},
        std::tuple{"--header-timeout", &args.header_timeout, &args.options.header_timeout}}) {
    auto d = policy::parseDuration(*text);
    if (!d) {
      std::fprintf(stderr, "sluice serve: %s %s: %s\n", flag, text->c_str(), d.error().c_str());
      return false;
    }
    *out = *d;
  }
  auto every = parseOtlpInterval(args.otlp_interval);  // the same rule as sluice proxy's
  if (!every) {
    std::fprintf(stderr, "sluice serve: %s\n", every.error().c_str());
    return false;
  }
  args.options.otlp_interval = *every;
  return true;
}

// The default audit store's directory, /var/lib/sluice, made root-only when missing: the .deb
// and the unit make it, but a `make install` or a first run by hand should not stop for it.
// Any other --audit path is the caller's to provide (serve says which directory is missing).
bool ensureDefaultStateDir(const std::string& audit_db) {
  static constexpr const char* kStateDir = "/var/lib/sluice";
  if (audit_db != serve::ServeOptions{}.audit_db) return true;
  if (::mkdir(kStateDir, 0700) == 0) {
    spdlog::info("created {} (mode 0700) for the audit store", kStateDir);
    return true;
  }
  if (errno == EEXIST) return true;
  std::fprintf(stderr, "sluice serve: cannot create %s for the audit store: %s\n", kStateDir,
               std::strerror(errno));
  return false;
}

int runServe(ServeArgs& args) {
  // First of all: the environment is changed (LISTEN_*), and the zygote must not see it.
  for (const auto& s : serve::takeSystemdSockets())
    args.options.inherited_listeners.push_back(s.fd);
  // JSON lines (spdlog's fields) where the journal reads them: journalctl -o json keeps them
  // whole, and a collector parses them without a pattern.
  const bool json =
      args.log_format == "json" || (args.log_format == "auto" && serve::stderrIsJournal());
  base::setLogFormat(json ? base::LogFormat::kJson : base::LogFormat::kText);
  sigset_t set = blockDaemonSignals();
  if (!parseDurations(args)) return 2;
  if (!ensureDefaultStateDir(args.options.audit_db)) return 1;
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

// Quotas and connection limits (docs/serve.md "Quotas" and "Limits").
void addAdmissionOptions(CLI::App& cmd, ServeArgs& args) {
  auto& o = args.options;
  cmd.add_option("--max-sessions", o.max_sessions, "Sessions open at once (default 64)");
  cmd.add_option("--max-sessions-per-caller", o.max_sessions_per_caller,
                 "Sessions one caller may hold (default: half of --max-sessions when two or more "
                 "callers are configured, else all)");
  cmd.add_option("--max-runs", o.max_runs, "Executions running at once, all callers (default 64)");
  cmd.add_option("--max-runs-per-caller", o.max_runs_per_caller,
                 "Executions one caller may run at once (default: as for sessions)");
  cmd.add_option("--max-session-ttl", args.max_session_ttl,
                 "Longest ttl or idle_timeout a session may ask for (default 24h)");
  cmd.add_option("--max-connections", o.max_connections,
                 "Connections open at once, all listeners (default 512)");
  cmd.add_option("--max-connections-per-peer", o.max_connections_per_peer,
                 "Connections from one TCP address or Unix uid (default: --max-connections / 4)");
  cmd.add_option("--header-timeout", args.header_timeout,
                 "Time a client has to send a request's header (default 10s)");
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
  cmd->add_option(
      "--token-file", o.token_file,
      "Bearer tokens for TCP callers: lines NAME TOKEN [approver] [metrics] (mode 0600)");
  cmd->add_option("--pool", o.pool, "Prepared sandboxes kept per workflow");
  cmd->add_option("--shadow-policy-dir", o.shadow_policy_dir,
                  "Candidate policies (NAME.yaml per workflow) decided alongside, not enforced");
  cmd->add_flag("--allow-learn", o.allow_learn,
                "Let runs and sessions ask for learn mode (\"learn\": true)");
  addAdmissionOptions(*cmd, *args);
  cmd->add_option("--drain", args->drain, "How long SIGTERM lets executions finish (30s)");
  cmd->add_option("--approver-uid", o.approver_uids, "Uid that may answer approvals");
  addOtlpOptions(*cmd, o.otlp_endpoint, o.otlp_ca, args->otlp_interval);
  cmd->add_option("--log-format", args->log_format,
                  "text, json, or auto: json when stderr is the journal (default)")
      ->check(CLI::IsMember({"auto", "text", "json"}));
  cmd->callback([args, &exit_code] { exit_code = runServe(*args); });
}

}  // namespace sluice::cli
