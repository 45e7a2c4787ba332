// `sluice proxy`: the egress proxy standalone, for containers or VMs that are already isolated.
// Each --listen ADDR:PORT pairs with the --workflow NAME at the same position. SIGHUP reloads
// the policy directory atomically (an invalid policy is rejected and the old one stays);
// SIGTERM/SIGINT stop accepting, drain and exit 0.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "sluice/audit/store.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::cli {

namespace {

struct ProxyArgs {
  std::string policy_dir;
  std::vector<std::string> listens;
  std::vector<std::string> workflows;
  std::string audit_db;
  std::string secrets;
  std::string ca_dir;
  std::string upstream_ca;
  unsigned threads = 0;
  std::string log_format = "text";
};

// JSON-lines log output (`--log-format json`): one object per line, message escaped.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch());
    std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[96];
    std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms.count() % 1000));
    auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json j = {{"ts", ts},
                        {"level", std::string(level.data(), level.size())},
                        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
                        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    auto line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

std::shared_ptr<spdlog::logger> cliLogger() {
  if (auto l = spdlog::get("proxy")) return l;
  return spdlog::stderr_color_mt("proxy");
}

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

// Loads the policy directory and compiles every served workflow; all or nothing.
std::expected<std::map<std::string, std::shared_ptr<const policy::Matcher>>, std::string>
loadMatchers(const ProxyArgs& args) {
  auto set = policy::loadPolicyDir(args.policy_dir);
  if (!set) return std::unexpected(set.error().str());
  std::map<std::string, std::shared_ptr<const policy::Matcher>> out;
  for (const auto& name : args.workflows) {
    auto it = set->workflows.find(name);
    if (it == set->workflows.end())
      return std::unexpected("workflow '" + name + "' not found in " + args.policy_dir);
    if (!out.count(name)) out[name] = policy::Matcher::compile(it->second);
  }
  return out;
}

int runProxy(const ProxyArgs& args) {
  // Block the signals before any thread starts (audit writer, resolver pool, I/O threads) so
  // every thread inherits the mask and only sigwait() below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Writes to a peer that went away must fail with EPIPE, not kill the process.
  signal(SIGPIPE, SIG_IGN);

  if (args.log_format == "json") spdlog::set_formatter(std::make_unique<JsonFormatter>());
  auto logger = cliLogger();
  if (args.log_format == "json") logger->set_formatter(std::make_unique<JsonFormatter>());

  if (args.listens.size() != args.workflows.size()) {
    std::fprintf(stderr,
                 "sluice proxy: give one --workflow per --listen (got %zu --listen, %zu "
                 "--workflow)\n",
                 args.listens.size(), args.workflows.size());
    return 2;
  }
  if (!args.secrets.empty() || !args.ca_dir.empty() || !args.upstream_ca.empty())
    logger->warn(
        "--secrets/--ca-dir/--upstream-ca are accepted but TLS inspection and "
        "credential injection are not available yet; tls: inspect rules are refused");

  auto matchers = loadMatchers(args);
  if (!matchers) {
    std::fprintf(stderr, "sluice proxy: %s\n", matchers.error().c_str());
    return 1;
  }

  std::shared_ptr<audit::EventSink> sink;
  std::shared_ptr<audit::Store> store;
  if (!args.audit_db.empty()) {
    auto s = audit::Store::open(args.audit_db);
    if (!s) {
      std::fprintf(stderr, "sluice proxy: cannot open audit store: %s\n",
                   s.error().message.c_str());
      return 1;
    }
    store = std::shared_ptr<audit::Store>(std::move(*s));
    sink = store;
  }

  proxy::ProxyOptions options;
  options.threads = args.threads;
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
    auto bound = px.listen(addr, port, {"", matchers->at(args.workflows[i])});
    if (!bound) {
      std::fprintf(stderr, "sluice proxy: %s\n", bound.error().message.c_str());
      return 1;
    }
  }
  px.start();
  logger->info("sluice proxy running ({} listener(s)); SIGHUP reloads {}, SIGTERM drains",
               args.listens.size(), args.policy_dir);

  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      auto fresh = loadMatchers(args);
      if (!fresh) {
        logger->error("policy reload rejected, keeping the policy in force:\n{}", fresh.error());
        continue;
      }
      for (auto& [name, m] : *fresh) px.replaceMatcher(name, m);
      logger->info("policy reloaded from {}", args.policy_dir);
      continue;
    }
    logger->info("signal {}: draining", sig);
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
  cmd->add_option("--secrets", args->secrets, "Secret store file (credential injection)");
  cmd->add_option("--ca-dir", args->ca_dir, "CA directory (TLS inspection)");
  cmd->add_option("--upstream-ca", args->upstream_ca, "CA bundle for upstream TLS");
  cmd->add_option("--threads", args->threads, "I/O threads (default: cores)");
  cmd->add_option("--log-format", args->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->callback([args, &exit_code] { exit_code = runProxy(*args); });
}

}  // namespace sluice::cli
