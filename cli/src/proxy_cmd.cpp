// `sluice proxy`: the egress proxy standalone, for containers or VMs that are already isolated.
// Each --listen ADDR:PORT pairs with the --workflow NAME at the same position. SIGHUP reloads
// the policy directory atomically (an invalid policy is rejected and the old one stays);
// SIGTERM/SIGINT stop accepting, drain and exit 0. `tls: inspect` rules need --ca-dir (a CA
// from `sluice ca init`); `${secret:NAME}` references need --secrets; both are checked at
// start and on every reload, and a policy that needs what is missing is refused.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "sluice/audit/signing.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/base/log.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/proxy.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::cli {

namespace {

struct ProxyArgs {
  std::string policy_dir;
  std::vector<std::string> listens;
  std::vector<std::string> workflows;
  std::string audit_db;
  std::string audit_group;
  std::string signing_key;  // audit checkpoints' Ed25519 key (issue 15)
  std::string secrets;
  std::string ca_dir;
  std::vector<std::string> upstream_cas;
  unsigned threads = 0;
  std::string log_format = "text";
  std::string limit_window = "1h";
};

// Splits ADDR:PORT / [V6]:PORT.
bool splitListen(const std::string& text, std::string& addr, std::uint16_t& port) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return false;
  addr = text.substr(0, colon);
  if (addr.size() >= 2 && addr.front() == '[' && addr.back() == ']')
    addr = addr.substr(1, addr.size() - 2);
  if (addr.empty()) return false;
  try {
    std::size_t used = 0;
    unsigned long p = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || p > 65535) return false;
    port = static_cast<std::uint16_t>(p);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Loads the policy directory and compiles every served workflow; all or nothing. A served
// workflow that inspects TLS without a CA, or references a secret the store lacks, is refused
// (by name; never a value).
}  // namespace

sigset_t blockDaemonSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

std::shared_ptr<runner::SandboxZygote> startZygote(const char* command) {
  auto zygote = runner::SandboxZygote::start();
  if (!zygote) {
    std::fprintf(stderr, "sluice %s: %s: %s\n", command, zygote.error().step.c_str(),
                 zygote.error().message.c_str());
    return nullptr;
  }
  return std::move(*zygote);
}

namespace {

std::expected<std::map<std::string, std::shared_ptr<const policy::Matcher>>, std::string>
loadMatchers(const ProxyArgs& args, bool have_ca, const policy::SecretStore* secrets) {
  auto set = policy::loadPolicyDir(args.policy_dir);
  if (!set) return std::unexpected(set.error().str());
  std::map<std::string, std::shared_ptr<const policy::Matcher>> out;
  for (const auto& name : args.workflows) {
    auto it = set->workflows.find(name);
    if (it == set->workflows.end())
      return std::unexpected("workflow '" + name + "' not found in " + args.policy_dir);
    const policy::Workflow& w = *it->second;
    if (!have_ca)
      for (const policy::Rule& r : w.rules)
        if (r.tls == policy::TlsMode::kInspect)
          return std::unexpected("workflow '" + name + "' rule '" + r.id +
                                 "' has tls: inspect, which needs --ca-dir DIR (sluice ca init)");
    if (auto missing = policy::missingSecrets(w, secrets); !missing.empty()) {
      std::string names;
      for (const auto& n : missing) names += (names.empty() ? "" : ", ") + n;
      return std::unexpected("workflow '" + name + "' references secret(s) " +
                             (args.secrets.empty() ? std::string("but no --secrets FILE is given: ")
                                                   : args.secrets + " lacks: ") +
                             names);
    }
    if (!out.count(name)) out[name] = policy::Matcher::compile(it->second);
  }
  return out;
}

int runProxy(const ProxyArgs& args) {
  // Before any thread starts (audit writer, resolver pool, I/O threads).
  sigset_t set = blockDaemonSignals();

  if (args.log_format == "json") base::setLogFormat(base::LogFormat::kJson);
  spdlog::logger& logger = base::logger(base::LoggerId::kProxy);

  if (args.listens.size() != args.workflows.size()) {
    std::fprintf(stderr,
                 "sluice proxy: give one --workflow per --listen (got %zu --listen, %zu "
                 "--workflow)\n",
                 args.listens.size(), args.workflows.size());
    return 2;
  }

  std::shared_ptr<proxy::CertificateAuthority> ca;
  if (!args.ca_dir.empty()) {
    auto loaded = proxy::CertificateAuthority::loadDirectory(args.ca_dir);
    if (!loaded) {
      std::fprintf(stderr, "sluice proxy: --ca-dir %s: %s\n", args.ca_dir.c_str(),
                   loaded.error().c_str());
      return 1;
    }
    ca = std::move(*loaded);
  }
  std::shared_ptr<const policy::SecretStore> secrets;
  if (!args.secrets.empty()) {
    auto loaded = policy::loadSecretsFile(args.secrets);
    if (!loaded) {
      std::fprintf(stderr, "sluice proxy: --secrets: %s\n", loaded.error().c_str());
      return 1;
    }
    secrets = std::move(*loaded);
  }
  for (const std::string& f : args.upstream_cas) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec) || ::access(f.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "sluice proxy: --upstream-ca %s: not a readable file\n", f.c_str());
      return 1;
    }
  }

  auto matchers = loadMatchers(args, ca != nullptr, secrets.get());
  if (!matchers) {
    std::fprintf(stderr, "sluice proxy: %s\n", matchers.error().c_str());
    return 1;
  }

  std::shared_ptr<audit::EventSink> sink;
  std::shared_ptr<audit::Store> store;
  if (!args.audit_db.empty()) {
    audit::StoreOptions store_options;
    if (!args.audit_group.empty()) {
      auto gid = groupId(args.audit_group);
      if (!gid) {
        std::fprintf(stderr, "sluice proxy: %s\n", gid.error().c_str());
        return 1;
      }
      store_options.group = *gid;
    }
    if (!args.signing_key.empty()) {
      auto key = audit::SigningKey::load(args.signing_key);
      if (!key) {
        std::fprintf(stderr, "sluice proxy: --signing-key: %s\n", key.error().message.c_str());
        return 1;
      }
      store_options.signing_key = *key;
    }
    auto s = audit::Store::open(args.audit_db, store_options);
    if (!s) {
      std::fprintf(stderr, "sluice proxy: cannot open audit store: %s\n",
                   s.error().message.c_str());
      return 1;
    }
    store = std::shared_ptr<audit::Store>(std::move(*s));
    sink = store;
  }

  auto window = policy::parseDuration(args.limit_window);
  if (!window || window->count() < 1000) {
    std::fprintf(stderr, "sluice proxy: --limit-window '%s': %s\n", args.limit_window.c_str(),
                 window ? "must be at least 1s" : window.error().c_str());
    return 2;
  }
  proxy::ProxyOptions options;
  options.threads = args.threads;
  options.ca = ca;
  options.upstream_ca_files = args.upstream_cas;
  auto created = proxy::Proxy::create(options, sink, nullptr);
  if (!created) {
    std::fprintf(stderr, "sluice proxy: %s\n", created.error().message.c_str());
    return 1;
  }
  auto& px = **created;

  for (std::size_t i = 0; i < args.listens.size(); ++i) {
    std::string addr;
    std::uint16_t port = 0;
    if (!splitListen(args.listens[i], addr, port)) {
      std::fprintf(stderr, "sluice proxy: --listen '%s' is not ADDR:PORT\n",
                   args.listens[i].c_str());
      return 2;
    }
    // No placeholders standalone: there is no sandbox to hand a token to; clients that need a
    // credential get it injected by `inject.headers`.
    proxy::ListenerIdentity identity{"", matchers->at(args.workflows[i]), secrets, {}};
    // Shared by many clients: the workflow's limits apply to each client over the window.
    identity.per_client_window = std::chrono::duration_cast<std::chrono::seconds>(*window);
    auto bound = px.listen(addr, port, std::move(identity));
    if (!bound) {
      std::fprintf(stderr, "sluice proxy: %s\n", bound.error().message.c_str());
      return 1;
    }
  }
  px.start();
  logger.info("sluice proxy running ({} listener(s)); SIGHUP reloads {}, SIGTERM drains",
              args.listens.size(), args.policy_dir);

  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      auto fresh = loadMatchers(args, ca != nullptr, secrets.get());
      if (!fresh) {
        logger.error("policy reload rejected, keeping the policy in force:\n{}", fresh.error());
        continue;
      }
      for (auto& [name, m] : *fresh) px.replaceMatcher(name, m);
      logger.info("policy reloaded from {}", args.policy_dir);
      continue;
    }
    logger.info("signal {}: draining", sig);
    break;
  }
  px.stop();
  if (store) {
    if (auto r = store->flush(); !r) {
      std::fprintf(stderr, "sluice proxy: audit store: %s\n", r.error().message.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

void addProxyCommands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ProxyArgs>();
  auto* cmd = app.add_subcommand(
      "proxy", "Run the egress proxy standalone: CONNECT and absolute-form HTTP under policy");
  cmd->add_option("--policy-dir", args->policy_dir, "Directory of workflow policy files")
      ->required();
  cmd->add_option("--listen", args->listens, "ADDR:PORT to listen on (repeatable)")->required();
  cmd->add_option("--workflow", args->workflows,
                  "Workflow served by the --listen at the same position (repeatable)")
      ->required();
  cmd->add_option("--audit", args->audit_db, "SQLite audit database");
  cmd->add_option("--signing-key", args->signing_key,
                  "Sign audit checkpoints with this Ed25519 key (sluice audit keygen; 0600)");
  cmd->add_option("--audit-group", args->audit_group,
                  "Create the audit database 0640 with this group (default: 0600, owner only)");
  cmd->add_option("--secrets", args->secrets,
                  "Secret store file, mode 0600 (credential injection)");
  cmd->add_option("--ca-dir", args->ca_dir,
                  "CA directory from `sluice ca init` (needed by tls: inspect rules)");
  cmd->add_option("--upstream-ca", args->upstream_cas,
                  "Extra CA file trusted for inspected upstreams (repeatable)");
  cmd->add_option("--threads", args->threads, "I/O threads (default: cores)");
  cmd->add_option("--limit-window", args->limit_window,
                  "egress.limits apply per client address over this window (default 1h)");
  cmd->add_option("--log-format", args->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->callback([args, &exit_code] { exit_code = runProxy(*args); });
}

}  // namespace sluice::cli
