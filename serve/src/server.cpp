// The daemon: io threads, the HTTP server, the API and the engine (server.hpp).
#include "sluice/serve/server.hpp"

#include <malloc.h>

#include <algorithm>
#include <thread>

#include "admission.hpp"
#include "api.hpp"
#include "auth.hpp"
#include "engine.hpp"
#include "http_server.hpp"
#include "metrics.hpp"
#include "pool.hpp"
#include "quotas.hpp"
#include "sessions.hpp"
#include "sluice/base/loop.hpp"

namespace sluice::serve {
namespace {

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(ServeOptions o) : options_(std::move(o)) {}
  ~ServerImpl() override { drain(); }

  std::expected<void, std::string> init() {
    HttpServerOptions hopts;
    if (auto r = httpOptions(hopts); !r) return r;
    auto engine = Engine::create(options_, metrics_);
    if (!engine) return std::unexpected(engine.error());
    engine_ = std::move(*engine);
    const Shares shares = sharesFor(options_, knownCallers(hopts));
    sessions_ = std::make_unique<SessionManager>(
        *engine_, shares.sessions, shares.sessions_per_caller, shares.max_session_ttl);
    admission_ = std::make_unique<Admission>(*sessions_, shares, options_.max_body_bytes);
    hopts.plan = [a = admission_.get()](const Request& head) { return a->plan(head); };
    pool_ = std::make_unique<Pool>(*engine_, options_.pool);
    engine_->setPool(pool_.get());
    api_ = std::make_unique<Api>(*engine_, metrics_, *sessions_);
    http_ = std::make_unique<HttpServer>(
        ioc_, std::move(hopts),
        [api = api_.get()](Request& r, Reply& reply) { return api->handle(r, reply); },
        [](int status, const std::string& reason, const std::string& message) {
          return errorBody(status, reason, message);
        });
    return {};
  }

  std::expected<void, std::string> start() override {
    for (int fd : options_.inherited_listeners) {
      auto adopted = http_->adopt(fd);
      if (!adopted) return std::unexpected(adopted.error());
      endpoints_.push_back(*adopted);
    }
    std::vector<std::string> specs = options_.listens;
    if (specs.empty() && options_.inherited_listeners.empty())
      specs.push_back("unix:/run/sluice/sluice.sock");
    for (const auto& spec : specs) {
      // A path systemd already listens on (the unit kept its old --listen): served once, on
      // systemd's socket; binding it again would unlink the socket systemd holds.
      if (std::find(endpoints_.begin(), endpoints_.end(), spec + " (from systemd)") !=
          endpoints_.end())
        continue;
      auto bound = http_->listen(spec);
      if (!bound) return std::unexpected(bound.error());
      endpoints_.push_back(*bound);
    }
    work_.emplace(net::make_work_guard(ioc_));
    for (unsigned i = 0; i < std::max(1u, options_.io_threads); ++i)
      threads_.emplace_back([this] { ioc_.run(); });
    // Idle timeouts and TTLs, checked twice a second.
    reaper_.start([this] { sessions_->reap(); }, std::chrono::milliseconds(500));
    return {};
  }

  std::expected<void, std::string> reload() override {
    auto r = engine_->reload();
    // Sandboxes prepared on the old policy are dropped; the pool refills on the new one.
    if (r && pool_) pool_->reload();
    return r;
  }

  void drain() override {
    if (drained_.exchange(true)) return;
    if (api_) {
      api_->startDraining();
      api_->waitForExecutions(options_.drain);
    }
    reaper_.stop();
    // Every session left ends with its summary receipt; prepared sandboxes are dropped.
    if (sessions_) sessions_->endAll("shutdown");
    if (pool_) pool_->stop();
    if (http_) http_->close();
    work_.reset();
    ioc_.stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    if (engine_) engine_->flush();
  }

  std::vector<std::string> endpoints() const override { return endpoints_; }

 private:
  // The HTTP server's tokens, connection caps and deadlines, from the options.
  std::expected<void, std::string> httpOptions(HttpServerOptions& h) {
    if (options_.max_sessions == 0 || options_.max_runs == 0 || options_.max_connections == 0)
      return std::unexpected(
          std::string("--max-sessions, --max-runs and --max-connections must be at least 1"));
    if (options_.max_session_ttl.count() <= 0)
      return std::unexpected(std::string("--max-session-ttl must be positive"));
    h.max_body_bytes = options_.max_body_bytes;
    h.approver_uids = options_.approver_uids;
    h.max_connections = options_.max_connections;
    h.max_connections_per_peer = options_.max_connections_per_peer > 0
                                     ? options_.max_connections_per_peer
                                     : std::max<std::size_t>(1, options_.max_connections / 4);
    h.header_timeout = options_.header_timeout;
    h.spool_dir = options_.spool_dir;
    h.refused = [m = &metrics_](const std::string& reason) { m->refused(reason); };
    if (!options_.token_file.empty()) {
      auto tokens = loadTokenFile(options_.token_file);
      if (!tokens) return std::unexpected("--token-file " + tokens.error());
      h.tokens = std::move(*tokens);
    }
    return {};
  }
  // Callers the daemon knows of (the default shares, quotas.hpp): every token, every approver
  // uid, and the Unix socket's owner.
  std::size_t knownCallers(const HttpServerOptions& h) const {
    const bool unix_listener =
        options_.listens.empty() || !options_.inherited_listeners.empty() ||
        std::any_of(options_.listens.begin(), options_.listens.end(),
                    [](const std::string& l) { return l.starts_with("unix:"); });
    return h.tokens.size() + h.approver_uids.size() + (unix_listener ? 1 : 0);
  }

  ServeOptions options_;
  Metrics metrics_;
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Api> api_;
  base::BackgroundLoop reaper_{"sluice-reaper"};
  std::unique_ptr<HttpServer> http_;
  std::vector<std::string> endpoints_;
  std::atomic<bool> drained_{false};
};

}  // namespace

Server::~Server() = default;

std::expected<std::unique_ptr<Server>, std::string> Server::create(ServeOptions options) {
  // glibc gives each new thread an arena of its own, up to 8 per core, and keeps what they
  // held: a daemon whose executions and sessions each run on a fresh thread would grow by
  // arenas. A few shared arenas keep RSS flat (the hot paths are not allocation-bound).
  ::mallopt(M_ARENA_MAX, 2);
  auto s = std::make_unique<ServerImpl>(std::move(options));
  if (auto r = s->init(); !r) return std::unexpected(r.error());
  return s;
}

}  // namespace sluice::serve
