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
#include "sluice/serve/otlp.hpp"

namespace sluice::cli {

namespace {

struct ProxyArgs {
  std::string policy_dir;
  std::vector<std::string> listens;
  std::vector<std::string> workflows;
  std::string audit_db;
  std::string audit_group;
  std::string signing_key;  // audit checkpoints' Ed25519 key
  std::string secrets;
  std::string ca_dir;
  std::vector<std::string> upstream_cas;
  unsigned threads = 0;
  std::string log_format = "text";
  std::string limit_window = "1h";
  std::string shadow_policy;  // --shadow-policy FILE: decided alongside on every listener
  std::string otlp_endpoint;  // empty: no OpenTelemetry export
  std::string otlp_interval = "10s";
  std::string otlp_ca;  // https: PEM CAs to trust; empty: the system's
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
    std::fprintf(stderr, "sluice %s: %s: %s\n", command, zygote.error().where.c_str(),
                 zygote.error().message.c_str());
    return nullptr;
  }
  return std::move(*zygote);
}

namespace {

using Matchers = std::map<std::string, std::shared_ptr<const policy::Matcher>>;

// Loads the policy directory and compiles every served workflow; all or nothing. A served
// workflow that inspects TLS without a CA, or references a secret the store lacks, is refused
// (by name; never a value).
std::expected<Matchers, std::string> loadMatchers(const ProxyArgs& args, bool have_ca,
                                                  const policy::SecretStore* secrets) {
  auto set = policy::loadPolicyDir(args.policy_dir);
  if (!set) return std::unexpected(set.error().toError().message);
  Matchers out;
  for (const auto& name : args.workflows) {
    auto it = set->workflows.find(name);
    if (it == set->workflows.end())
      return std::unexpected(set->unknownWorkflow(name, args.policy_dir));
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

// A step of `sluice proxy` that failed: the text after "sluice proxy: " and the exit status
// (2: the arguments themselves are wrong; 1: what they name cannot be used).
struct Failure {
  int status = 1;
  std::string message;
};
template <typename T = void>
using Step = std::expected<T, Failure>;

std::unexpected<Failure> failed(int status, std::string message) {
  return std::unexpected(Failure{status, std::move(message)});
}

// What the listeners are served with, loaded from the arguments before any of them opens.
struct Served {
  std::shared_ptr<proxy::CertificateAuthority> ca;
  std::shared_ptr<const policy::SecretStore> secrets;
  Matchers matchers;
  std::shared_ptr<audit::Store> store;              // null without --audit
  std::chrono::seconds window{};                    // --limit-window
  std::shared_ptr<const policy::Matcher> shadow;    // --shadow-policy (null: none)
  std::unique_ptr<serve::OtlpProxyTelemetry> otlp;  // null without --otlp-endpoint
};

Step<> checkListenPairs(const ProxyArgs& args, Served&) {
  if (args.listens.size() == args.workflows.size()) return {};
  return failed(2, "give one --workflow per --listen (got " + std::to_string(args.listens.size()) +
                       " --listen, " + std::to_string(args.workflows.size()) + " --workflow)");
}

Step<> loadCa(const ProxyArgs& args, Served& s) {
  if (args.ca_dir.empty()) return {};
  auto loaded = proxy::CertificateAuthority::loadDirectory(args.ca_dir);
  if (!loaded) return failed(1, "--ca-dir " + args.ca_dir + ": " + loaded.error());
  s.ca = std::move(*loaded);
  return {};
}

Step<> loadSecrets(const ProxyArgs& args, Served& s) {
  if (args.secrets.empty()) return {};
  auto loaded = policy::loadSecretStore(args.secrets);
  if (!loaded) return failed(1, "--secrets: " + loaded.error().message);
  s.secrets = std::move(*loaded);
  return {};
}

Step<> checkUpstreamCas(const ProxyArgs& args, Served&) {
  for (const std::string& f : args.upstream_cas) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec) || ::access(f.c_str(), R_OK) != 0)
      return failed(1, "--upstream-ca " + f + ": not a readable file");
  }
  return {};
}

Step<> compileMatchers(const ProxyArgs& args, Served& s) {
  auto matchers = loadMatchers(args, s.ca != nullptr, s.secrets.get());
  if (!matchers) return failed(1, matchers.error());
  s.matchers = std::move(*matchers);
  return {};
}

Step<> compileShadow(const ProxyArgs& args, Served& s) {
  if (args.shadow_policy.empty()) return {};
  auto w = policy::loadWorkflowFile(args.shadow_policy);
  if (!w) return failed(1, "--shadow-policy: " + w.error().str());
  s.shadow = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
  return {};
}

Step<> openAuditStore(const ProxyArgs& args, Served& s) {
  if (args.audit_db.empty()) return {};
  audit::StoreOptions store_options;
  if (!args.audit_group.empty()) {
    auto gid = groupId(args.audit_group);
    if (!gid) return failed(1, gid.error());
    store_options.group = *gid;
  }
  if (!args.signing_key.empty()) {
    auto key = audit::SigningKey::load(args.signing_key);
    if (!key) return failed(1, "--signing-key: " + key.error().message);
    store_options.signing_key = *key;
  }
  auto opened = audit::Store::open(args.audit_db, store_options);
  if (!opened) return failed(1, "cannot open audit store: " + opened.error().message);
  s.store = std::shared_ptr<audit::Store>(std::move(*opened));
  return {};
}

Step<> readLimitWindow(const ProxyArgs& args, Served& s) {
  auto window = policy::parseDuration(args.limit_window);
  if (!window || window->count() < 1000)
    return failed(2, "--limit-window '" + args.limit_window +
                         "': " + (window ? "must be at least 1s" : window.error()));
  s.window = std::chrono::duration_cast<std::chrono::seconds>(*window);
  return {};
}

Step<> startOtlp(const ProxyArgs& args, Served& s) {
  if (args.otlp_endpoint.empty()) return {};
  auto interval = parseOtlpInterval(args.otlp_interval);
  if (!interval) return failed(2, interval.error());
  serve::OtlpOptions options;
  options.endpoint = args.otlp_endpoint;
  options.interval = *interval;
  options.ca_file = args.otlp_ca;
  auto started = serve::OtlpProxyTelemetry::start(std::move(options), s.store);
  if (!started) return failed(2, started.error().message);
  s.otlp = std::move(*started);
  return {};
}

// Everything the arguments name, in this order (the first that fails is reported).
Step<Served> loadServed(const ProxyArgs& args) {
  using Load = Step<> (*)(const ProxyArgs&, Served&);
  static constexpr Load kSteps[] = {checkListenPairs, loadCa,          loadSecrets,
                                    checkUpstreamCas, compileMatchers, compileShadow,
                                    openAuditStore,   readLimitWindow, startOtlp};
  Served s;
  for (Load step : kSteps)
    if (auto r = step(args, s); !r) return std::unexpected(std::move(r.error()));
  return s;
}

// The proxy with one listener per --listen, each serving its --workflow; started.
Step<std::unique_ptr<proxy::Proxy>> startProxy(const ProxyArgs& args, const Served& s) {
  proxy::ProxyOptions options;
  options.threads = args.threads;
  options.ca = s.ca;
  options.upstream_ca_files = args.upstream_cas;
  std::shared_ptr<audit::EventSink> sink = s.store;
  if (s.otlp) sink = s.otlp->sink();
  auto created = proxy::Proxy::create(options, std::move(sink), nullptr);
  if (!created) return failed(1, created.error().message);
  for (std::size_t i = 0; i < args.listens.size(); ++i) {
    std::string addr;
    std::uint16_t port = 0;
    if (!splitListen(args.listens[i], addr, port))
      return failed(2, "--listen '" + args.listens[i] + "' is not ADDR:PORT");
    // No placeholders standalone: there is no sandbox to hand a token to; clients that need a
    // credential get it injected by `inject.headers`.
    proxy::ListenerIdentity identity{"", s.matchers.at(args.workflows[i]), s.secrets, {}};
    // Shared by many clients: the workflow's limits apply to each client over the window.
    identity.per_client_window = s.window;
    identity.shadow = s.shadow;
    auto bound = (*created)->listen(addr, port, std::move(identity));
    if (!bound) return failed(1, bound.error().message);
  }
  (*created)->start();
  return std::move(*created);
}

// Until SIGTERM or SIGINT: SIGHUP reloads the policy (a broken one is rejected, the old one
// stays in force).
void serveUntilStopped(proxy::Proxy& px, const ProxyArgs& args, const Served& s,
                       const sigset_t& signals) {
  spdlog::logger& logger = base::logger(base::LoggerId::kProxy);
  logger.info("sluice proxy running ({} listener(s)); SIGHUP reloads {}, SIGTERM drains",
              args.listens.size(), args.policy_dir);
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig != SIGHUP) {
      logger.info("signal {}: draining", sig);
      return;
    }
    auto fresh = loadMatchers(args, s.ca != nullptr, s.secrets.get());
    if (!fresh) {
      logger.error("policy reload rejected, keeping the policy in force:\n{}", fresh.error());
      continue;
    }
    for (auto& [name, m] : *fresh) px.replaceMatcher(name, m);
    logger.info("policy reloaded from {}", args.policy_dir);
  }
}

int report(const Failure& f) {
  std::fprintf(stderr, "sluice proxy: %s\n", f.message.c_str());
  return f.status;
}

int runProxy(const ProxyArgs& args) {
  // Before any thread starts (audit writer, resolver pool, I/O threads).
  const sigset_t signals = blockDaemonSignals();
  if (args.log_format == "json") base::setLogFormat(base::LogFormat::kJson);
  auto served = loadServed(args);
  if (!served) return report(served.error());
  auto px = startProxy(args, *served);
  if (!px) return report(px.error());
  serveUntilStopped(**px, args, *served, signals);
  (*px)->stop();
  if (served->otlp) served->otlp->stop();
  if (served->store) {
    if (auto r = served->store->flush(); !r)
      return report({1, "audit store: " + r.error().message});
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
  cmd->add_option("--shadow-policy", args->shadow_policy,
                  "Candidate policy decided alongside on every listener, recorded, not enforced");
  addOtlpOptions(*cmd, args->otlp_endpoint, args->otlp_ca, args->otlp_interval);
  cmd->add_option("--log-format", args->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->callback([args, &exit_code] { exit_code = runProxy(*args); });
}

void addOtlpOptions(CLI::App& cmd, std::string& endpoint, std::string& ca, std::string& interval) {
  cmd.add_option("--otlp-endpoint", endpoint,
                 "Export decision events and counters as OTLP/HTTP JSON to this http[s]:// URL");
  cmd.add_option("--otlp-ca", ca,
                 "PEM CAs to trust for an https:// --otlp-endpoint (default: the system's)");
  cmd.add_option("--otlp-interval", interval, "Period of the OTLP metrics export (default 10s)");
}

std::expected<std::chrono::milliseconds, std::string> parseOtlpInterval(const std::string& text) {
  auto interval = policy::parseDuration(text);
  if (!interval || interval->count() < 1000)
    return std::unexpected("--otlp-interval '" + text +
                           "': " + (interval ? "must be at least 1s" : interval.error()));
  return *interval;
}

}  // namespace sluice::cli
