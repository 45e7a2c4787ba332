// serve's API in-process, for tests: the pieces `sluice serve` is built of, wired as
// serve/src/server.cpp wires them (Engine, SessionManager, Pool, Api, the session reaper), with
// no HTTP server in front. Each request goes to Api::handle() on an io_context of its own, with
// a Reply that keeps what is written. Callers are given, not authenticated, and bodies are not
// admitted: the HTTP server (sockets, tokens, admission, body limits) is tested over its
// sockets (serve_test.cpp's socket tests, admission_test.cpp).
#pragma once

#include <unistd.h>

#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api.hpp"
#include "auth.hpp"
#include "engine.hpp"
#include "http_body.hpp"
#include "metrics.hpp"
#include "pool.hpp"
#include "quotas.hpp"
#include "serve_client.hpp"
#include "sessions.hpp"
#include "sluice/base/loop.hpp"

namespace serve_test {

/// A Reply that records the answer: status, content type and body (the chunks of a stream,
/// concatenated), as a Response whose head carries Content-Type (and Retry-After).
class RecordingReply final : public sluice::serve::Reply {
 public:
  explicit RecordingReply(sluice::net::any_io_executor executor) : executor_(executor) {}

  sluice::net::awaitable<bool> send(sluice::http::status status, std::string content_type,
                                    std::string body) override {
    begin(status, std::move(content_type));
    body_ = std::move(body);
    co_return true;
  }
  sluice::net::awaitable<bool> beginStream(sluice::http::status status,
                                           std::string content_type) override {
    begin(status, std::move(content_type));
    co_return true;
  }
  sluice::net::awaitable<bool> chunk(std::string data) override {
    body_ += data;
    co_return true;
  }
  sluice::net::awaitable<bool> endStream() override { co_return true; }
  sluice::net::any_io_executor executor() override { return executor_; }
  void watchClose(std::function<void()>) override {}
  void stopWatching() override {}
  // No socket: every answer comes through send() (the worker's direct write needs one).
  std::unique_ptr<sluice::serve::DirectAnswer> direct() override { return nullptr; }
  sluice::net::awaitable<bool> sendRest(const sluice::serve::DirectAnswer&) override {
    co_return false;
  }

  Response response() const {
    Response r;
    r.status = status_;
    r.head = "HTTP/1.1 " + std::to_string(status_) + "\r\nContent-Type: " + content_type_ + "\r\n";
    if (retry_after_sent_ > 0)
      r.head += "Retry-After: " + std::to_string(retry_after_sent_) + "\r\n";
    r.body = body_;
    return r;
  }

 private:
  void begin(sluice::http::status status, std::string content_type) {
    status_ = static_cast<int>(status);
    content_type_ = std::move(content_type);
    retry_after_sent_ = std::exchange(retry_after_, 0);
  }
  sluice::net::any_io_executor executor_;
  int status_ = 0;
  std::string content_type_;
  std::string body_;
  unsigned retry_after_sent_ = 0;
};

/// The daemon's API without its HTTP server.
class ApiHarness {
 public:
  static std::expected<std::unique_ptr<ApiHarness>, std::string> create(
      sluice::serve::ServeOptions options) {
    std::unique_ptr<ApiHarness> h(new ApiHarness(std::move(options)));
    if (auto r = h->init(); !r) return std::unexpected(r.error());
    return h;
  }
  ~ApiHarness() { drain(); }

  /// The caller of a Unix-socket client of this process's uid (root is an approver).
  static sluice::serve::Caller unixCaller() {
    return {"uid:" + std::to_string(::getuid()), ::getuid() == 0, false};
  }
  /// The caller the token file names for `token` (as the TCP listener authenticates it).
  sluice::serve::Caller tokenCaller(const std::string& token) const {
    auto c = sluice::serve::callerForBearer(tokens_, "Bearer " + token);
    EXPECT_TRUE(c.has_value()) << "no such token in the token file";
    return c.value_or(sluice::serve::Caller{});
  }

  /// Api::handle() for one request: `accept` as the Accept header; a PUT of a file is
  /// spooled as the HTTP server spools it.
  Response call(const sluice::serve::Caller& caller, const std::string& method,
                const std::string& target, const std::string& body = "",
                const std::string& accept = "") {
    namespace sv = sluice::serve;
    sv::Request req;
    req.method = sluice::http::string_to_verb(method);
    req.method_text = method;
    req.target = target;
    req.content_type = "application/json";
    req.accept = accept;
    req.caller = caller;
    if (req.method == sluice::http::verb::put && target.find("/files/") != std::string::npos) {
      req.spooled = spool(body);
    } else {
      req.body = body;
    }
    sluice::net::io_context ioc;
    RecordingReply reply(ioc.get_executor());
    sluice::net::co_spawn(ioc, api_->handle(req, reply), sluice::net::detached);
    ioc.run();
    return reply.response();
  }

  /// As Server::reload(): the policy directory again, and the pool refilled on it.
  std::expected<void, std::string> reload() {
    auto r = engine_->reload();
    if (r) pool_->reload();
    return r;
  }

  /// As Server::drain(), without the listeners.
  void drain() {
    if (drained_ || !api_) return;  // drained, or init() failed
    drained_ = true;
    api_->startDraining();
    api_->waitForExecutions(options_.drain);
    reaper_.stop();
    sessions_->endAll("shutdown");
    pool_->stop();
    engine_->flush();
  }

 private:
  explicit ApiHarness(sluice::serve::ServeOptions options) : options_(std::move(options)) {}

  std::expected<void, std::string> init() {
    namespace sv = sluice::serve;
    if (!options_.token_file.empty()) {
      auto tokens = sv::loadTokenFile(options_.token_file);
      if (!tokens) return std::unexpected("--token-file " + tokens.error());
      tokens_ = std::move(*tokens);
    }
    auto engine = sv::Engine::create(options_, metrics_);
    if (!engine) return std::unexpected(engine.error());
    engine_ = std::move(*engine);
    // Known callers as the daemon counts them: every token, every approver uid, the socket's
    // owner.
    const sv::Shares shares =
        sv::sharesFor(options_, tokens_.size() + options_.approver_uids.size() + 1);
    sessions_ = std::make_unique<sv::SessionManager>(
        *engine_, shares.sessions, shares.sessions_per_caller, shares.max_session_ttl);
    pool_ = std::make_unique<sv::Pool>(*engine_, options_.pool);
    engine_->setPool(pool_.get());
    api_ = std::make_unique<sv::Api>(*engine_, metrics_, *sessions_);
    reaper_.start([this] { sessions_->reap(); }, std::chrono::milliseconds(500));
    return {};
  }

  static std::shared_ptr<sluice::serve::SpooledBody> spool(const std::string& body) {
    auto s = sluice::serve::detail::openSpool("");
    if (!s) return nullptr;
    sluice::serve::detail::writeAll(s->fd, body.data(), body.size());
    ::lseek(s->fd, 0, SEEK_SET);
    s->bytes = body.size();
    return s;
  }

  sluice::serve::ServeOptions options_;
  std::vector<sluice::serve::Token> tokens_;
  sluice::serve::Metrics metrics_;
  std::unique_ptr<sluice::serve::Engine> engine_;
  std::unique_ptr<sluice::serve::SessionManager> sessions_;
  std::unique_ptr<sluice::serve::Pool> pool_;
  std::unique_ptr<sluice::serve::Api> api_;
  sluice::base::BackgroundLoop reaper_{"sluice-reaper"};
  bool drained_ = false;
};

}  // namespace serve_test
