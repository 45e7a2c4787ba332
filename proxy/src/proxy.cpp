// The Proxy object: io_context and its threads, listeners (bound or adopted), accept loops,
// policy reload, drain on stop, and per-execution stats.
#include "sluice/proxy/proxy.hpp"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <thread>

#include "blocked_log.hpp"
#include "client_connection.hpp"
#include "context.hpp"
#include "dns_server.hpp"
#include "log.hpp"
#include "parked_upstreams.hpp"
#include "policy_cut.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/net.hpp"
#include "tls_context.hpp"
#include "token_source.hpp"

namespace sluice::proxy {

namespace {

constexpr int kListenBacklog = 4096;

// Connection ids' prefix: unique per proxy, not secret. getrandom(2) rather than
// std::random_device, whose RDRAND probe (CPUID) traps on some VMs at ~18 us per process start.
std::string randomPrefix() {
  std::uint32_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v))
    v = static_cast<std::uint32_t>(::getpid()) ^
        static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(v));
  return std::string(buf, 8);
}

net::awaitable<void> acceptLoop(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> l) {
  auto& ioc = static_cast<net::io_context&>(l->acceptor.get_executor().context());
  net::steady_timer backoff(l->acceptor.get_executor());
  for (;;) {
    ErrorCode ec;
    // Each connection gets its own strand: its client and upstream sockets, timers and
    // coroutines never run concurrently, yet connections spread over all threads.
    // With a single I/O thread the io_context itself serialises handlers; a strand would only
    // add locking and reference counting to every operation.
    net::any_io_executor ex = ctx->single_thread ? net::any_io_executor(ioc.get_executor())
                                                 : net::any_io_executor(net::make_strand(ioc));
    tcp::socket s =
        co_await l->acceptor.async_accept(ex, net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || !l->acceptor.is_open()) co_return;
    if (ec) {
      // EMFILE/ENFILE/ENOBUFS: back off briefly instead of spinning.
      log().warn("accept failed on {}: {}", l->execution_id, ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    if (ctx->draining.load()) continue;  // socket closes as it goes out of scope
    startClientConnection(ctx, l, std::move(s));
  }
}

class ProxyImpl : public Proxy {
 public:
  ProxyImpl(ProxyOptions options, std::shared_ptr<audit::EventSink> sink,
            std::shared_ptr<Resolver> resolver, unsigned threads)
      : ioc_(static_cast<int>(threads)),
        resolve_pool_(4),
        ctx_(std::make_shared<Context>()),
        threads_count_(threads) {
    ctx_->options = options;
    ctx_->sink = std::move(sink);
    ctx_->resolver = resolver ? std::move(resolver) : systemResolver();
    ctx_->resolve_pool = &resolve_pool_;
    ctx_->id_prefix = randomPrefix();
    ctx_->single_thread = threads_count_ == 1;
    ctx_->tokens = std::make_shared<TokenCache>();
    ctx_->parked = std::make_shared<ParkedUpstreams>(options.parked_upstream_idle);
  }

  ~ProxyImpl() override { stop(); }

  void setTls(std::shared_ptr<TlsContexts> tls) { ctx_->tls = std::move(tls); }

  // A listener record serving `identity` (not yet bound or accepting).
  std::shared_ptr<Listener> makeListener(ListenerIdentity identity) {
    auto l = std::make_shared<Listener>(ioc_, identity.execution_id, identity.matcher);
    l->secrets = std::move(identity.secrets);
    l->placeholders = std::move(identity.placeholders);
    l->names = std::move(identity.names);
    l->approvals = std::move(identity.approvals);
    l->session_id = std::move(identity.session_id);
    l->caller = std::move(identity.caller);
    if (identity.per_client_window.count() > 0)
      l->clients = std::make_unique<ClientBudgets>(identity.per_client_window);
    setShadowAndLearn(*l, identity);
    return l;
  }

  std::expected<std::uint16_t, Error> listen(const std::string& addr, std::uint16_t port,
                                             ListenerIdentity identity) override {
    if (!identity.matcher)
      return std::unexpected(
          Error{base::Code::kInvalidArgument, "listen: no policy matcher given"});
    ErrorCode ec;
    auto ip = net::ip::make_address(addr, ec);
    if (ec)
      return std::unexpected(
          Error{base::Code::kInvalidArgument, "listen: '" + addr + "' is not an IP address"});
    auto l = makeListener(std::move(identity));
    tcp::endpoint ep(ip, port);
    l->acceptor.open(ep.protocol(), ec);
    if (!ec) l->acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) l->acceptor.bind(ep, ec);
    if (!ec) l->acceptor.listen(kListenBacklog, ec);
    if (ec)
      return std::unexpected(
          Error{base::Code::kIo,
                "cannot listen on " + addr + ":" + std::to_string(port) + ": " + ec.message()});
    auto port_bound = l->acceptor.local_endpoint(ec).port();
    add(std::move(l));
    return port_bound;
  }

  std::expected<void, Error> adoptListener(int fd, ListenerIdentity identity) override {
    if (!identity.matcher) {
      ::close(fd);
      return std::unexpected(
          Error{base::Code::kInvalidArgument, "adoptListener: no policy matcher given"});
    }
    int type = 0;
    int accepting = 0;
    socklen_t len = sizeof type;
    // Only a listening stream socket makes sense here; anything else is a caller bug.
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
      ::close(fd);
      return std::unexpected(
          Error{base::Code::kInvalidArgument,
                "adoptListener: fd " + std::to_string(fd) + " is not a stream socket"});
    }
    len = sizeof accepting;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) {
      ::close(fd);
      return std::unexpected(
          Error{base::Code::kInvalidArgument,
                "adoptListener: fd " + std::to_string(fd) + " is not listening"});
    }
    sockaddr_storage ss{};
    len = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
        (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
      ::close(fd);
      return std::unexpected(
          Error{base::Code::kInvalidArgument,
                "adoptListener: fd " + std::to_string(fd) + " is not an IPv4/IPv6 socket"});
    }
    auto l = makeListener(std::move(identity));
    ErrorCode ec;
    l->acceptor.assign(ss.ss_family == AF_INET ? tcp::v4() : tcp::v6(), fd, ec);
    if (ec) {
      ::close(fd);
      return std::unexpected(Error{base::Code::kIo, "adoptListener: " + ec.message()});
    }
    add(std::move(l));
    return {};
  }

  std::expected<void, Error> adoptDns(int udp_fd, int tcp_fd, ListenerIdentity identity) override {
    auto closeBoth = [&](std::string why) -> std::expected<void, Error> {
      if (udp_fd >= 0) ::close(udp_fd);
      if (tcp_fd >= 0) ::close(tcp_fd);
      return std::unexpected(Error{base::Code::kInvalidArgument, "adoptDns: " + std::move(why)});
    };
    if (!identity.matcher) return closeBoth("no policy matcher given");
    if (!identity.names) return closeBoth("no synthetic-name map given");
    auto answerer = std::make_shared<dns::Answerer>(identity.matcher, identity.names);
    answerer->setShadowAndLearn(identity.shadow, identity.learn);
    auto e = std::make_shared<dns::Endpoint>(ioc_, identity.execution_id, std::move(answerer),
                                             ctx_->sink);
    if (auto r = e->adopt(udp_fd, tcp_fd); !r) return r;
    e->nameRowsWith(ctx_->row_names);
    recordPolicy(*identity.matcher);
    {
      std::lock_guard lock(mu_);
      if (stopped_) {
        e->close(false);
        return std::unexpected(Error{base::Code::kUnavailable, "adoptDns: the proxy is stopped"});
      }
      dns_.push_back(e);
      // The receipt's DNS counts: the execution's account.
      if (auto account = executionAccountLocked(identity.execution_id)) e->chargeTo(account);
    }
    e->start();
    log().info("serving DNS for workflow {}{}", identity.matcher->workflow().name,
               identity.execution_id.empty() ? "" : " (execution " + identity.execution_id + ")");
    return {};
  }

  std::expected<void, Error> adoptBlockedLog(int fd, ListenerIdentity identity) override {
    if (!identity.matcher) {
      if (fd >= 0) ::close(fd);
      return std::unexpected(
          Error{base::Code::kInvalidArgument, "adoptBlockedLog: no policy matcher given"});
    }
    const auto& w = identity.matcher->workflow();
    auto b = std::make_shared<blocked::Log>(ioc_, ctx_, identity.execution_id, w.name, w.sha256);
    if (auto r = b->adopt(fd); !r) return r;
    {
      std::lock_guard lock(mu_);
      if (stopped_) {
        b->close(false).wait();
        return std::unexpected(
            Error{base::Code::kUnavailable, "adoptBlockedLog: the proxy is stopped"});
      }
      blocked_.push_back(b);
      if (auto account = executionAccountLocked(identity.execution_id)) b->chargeTo(account);
    }
    b->start();
    return {};
  }

  // Starts closing the blocked-attempt logs `which` selects (each reads what its socket still
  // holds and writes its rows, on its strand) and forgets them; the caller waits for the
  // futures (after its other closes, so that they overlap).
  template <typename Pred>
  std::vector<std::future<void>> closeBlocked(Pred which) {
    std::vector<std::shared_ptr<blocked::Log>> bs;
    {
      std::lock_guard lock(mu_);
      for (auto& b : blocked_)
        if (which(*b)) bs.push_back(b);
      std::erase_if(blocked_, [&](const auto& b) { return which(*b); });
    }
    const bool running = started_ && !ioc_.stopped();
    std::vector<std::future<void>> closing;
    for (auto& b : bs) closing.push_back(b->close(running));
    return closing;
  }
  static void waitAll(std::vector<std::future<void>>& fs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (auto& f : fs) f.wait_until(deadline);
  }

  void closeExecution(const std::string& execution_id) override {
    auto blocked =
        closeBlocked([&](const blocked::Log& b) { return b.executionId() == execution_id; });
    closeDns([&](const dns::Endpoint& e) { return e.executionId() == execution_id; });
    waitAll(blocked);
    std::vector<std::shared_ptr<Listener>> ls;
    {
      std::lock_guard lock(mu_);
      for (auto& l : listeners_)
        if (l->execution_id == execution_id) ls.push_back(l);
    }
    for (auto& l : ls) {
      closeAcceptor(l);
      l->forEachAccount([](Account& a) { a.abortAll(); });
    }
    if (started_) {
      // Wait (bounded) until those connections have ended, so their audit rows are written
      // and stats() is final when this returns.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      for (auto& l : ls) {
        while (l->account->liveCount() > 0 && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    for (auto& l : ls) l->forEachAccount([&](Account& a) { ctx_->parked->dropAccount(a); });
    if (execution_id.empty() || ls.empty()) return;
    // Free the listener records (a long-running proxy serves executions without end); their
    // final counters stay readable through stats() for the most recent kKeptStats.
    Stats final_stats = sumAccounts(ls);
    std::lock_guard lock(mu_);
    std::erase_if(listeners_, [&](const auto& l) { return l->execution_id == execution_id; });
    {
      std::lock_guard elock(ctx_->endpoints_mu);
      for (auto& l : ls) std::erase(ctx_->own_endpoints, l->local);
    }
    finished_.emplace_back(execution_id, std::move(final_stats));
    if (finished_.size() > kKeptStats) finished_.pop_front();
  }

  void setCurrentExecution(const std::string& owner, const std::string& execution_id) override {
    ctx_->row_names->set(owner, execution_id);
  }

  void replaceMatcher(const std::string& workflow,
                      std::shared_ptr<const policy::Matcher> matcher) override {
    if (!matcher) return;
    swapPolicy(std::move(matcher), [&](const std::string&, const policy::Matcher& now) {
      return now.workflow().name == workflow;
    });
  }

  std::expected<std::uint64_t, Error> replacePolicy(
      const std::string& execution_id, std::shared_ptr<const policy::Matcher> matcher) override {
    if (!matcher || execution_id.empty())
      return std::unexpected(Error{base::Code::kInvalidArgument, "replacePolicy: no policy"});
    const auto generation = swapPolicy(
        std::move(matcher),
        [&](const std::string& id, const policy::Matcher&) { return id == execution_id; });
    if (generation == 0)
      return std::unexpected(
          Error{base::Code::kNotFound, "no listener serves execution " + execution_id});
    return generation;
  }

  void start() override {
    std::lock_guard lock(mu_);
    if (started_ || stopped_) return;
    started_ = true;
    work_.emplace(net::make_work_guard(ioc_));
    for (unsigned i = 0; i < threads_count_; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  void stop() override {
    std::vector<std::shared_ptr<Listener>> ls;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      ls = listeners_;
    }
    ctx_->draining.store(true);
    for (auto& l : ls) closeAcceptor(l);
    auto blocked = closeBlocked([](const blocked::Log&) { return true; });
    closeDns([](const dns::Endpoint&) { return true; });
    waitAll(blocked);
    // Kept-alive clients waiting for their next request would otherwise hold the drain up.
    for (auto& l : ls) l->forEachAccount([](Account& a) { a.closeIdle(); });
    if (started_) {
      // Let in-flight requests and tunnels finish, then close what is left.
      auto deadline = std::chrono::steady_clock::now() + ctx_->options.drain_timeout;
      while (ctx_->live.load() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (auto& l : ls) l->forEachAccount([](Account& a) { a.abortAll(); });
      auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (ctx_->live.load() > 0 && std::chrono::steady_clock::now() < hard)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ctx_->parked->clear();
    work_.reset();
    ioc_.stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    resolve_pool_.join();
  }

  Stats stats(const std::string& execution_id) const override {
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<Listener>> ls;
    for (const auto& l : listeners_)
      if (l->execution_id == execution_id) ls.push_back(l);
    if (ls.empty())
      for (const auto& [id, f] : finished_)
        if (id == execution_id) return f;
    return sumAccounts(ls);
  }

 private:
  // The counters of `ls`, each account once (an execution's listeners share theirs).
  static Stats sumAccounts(const std::vector<std::shared_ptr<Listener>>& ls) {
    Stats s;
    std::vector<const Account*> counted;
    for (const auto& l : ls)
      if (std::find(counted.begin(), counted.end(), l->account.get()) == counted.end()) {
        counted.push_back(l->account.get());
        l->account->addTo(s);
      }
    return s;
  }

  // Swaps the policy of the listeners and DNS endpoints `which(execution_id, matcher now)`
  // selects as ONE new generation (one past the newest of theirs), once its text is recorded
  // (no row names a policy the store lacks). Returns that generation, 0 when none matched.
  template <typename Pred>
  std::uint64_t swapPolicy(std::shared_ptr<const policy::Matcher> matcher, Pred which) {
    recordPolicy(*matcher);
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<Listener>> ls;
    std::vector<std::shared_ptr<dns::Endpoint>> es;
    std::uint64_t newest = 0;
    for (auto& l : listeners_) {
      const auto now = l->policy();
      if (!which(l->execution_id, *now.matcher)) continue;
      newest = std::max(newest, now.generation);
      ls.push_back(l);
    }
    for (auto& e : dns_) {
      const auto now = e->answerer().policy();
      if (!which(e->executionId(), *now.matcher)) continue;
      newest = std::max(newest, now.generation);
      es.push_back(e);
    }
    if (ls.empty() && es.empty()) return 0;
    const PolicySnapshot next{std::move(matcher), newest + 1};
    const PolicyGeneration noted{next.generation, next.workflow().sha256, base::nowMs()};
    for (auto& l : ls) {
      l->setPolicy(next);
      l->account->notePolicy(noted);
      // A reload starts every client's budget again (docs/proxy.md, "Standalone proxy").
      if (l->clients) l->clients->reset();
    }
    for (auto& e : es) e->answerer().setPolicy(next);
    // What the new policy refuses is cut now (open tunnels); requests and DNS queries are
    // decided by it as they come.
    for (auto& l : ls) {
      PolicySnapshot judged = next;  // as this listener's admission judges: in learn mode or not
      judged.learn = l->learn;
      l->forEachAccount([&](Account& a) { a.redecideAll(judged); });
      redecideApprovals(*l, judged);
    }
    return next.generation;
  }

  // The approvals `l`'s connections wait for, decided again by `p` (a live update or a
  // reload): what it refuses outright is answered deny, what it allows outright is released
  // as allowed, what it still asks for stays for an approver. Either answer names p's
  // generation; the waiting connection then applies it to the policy in force (admission.cpp).
  static void redecideApprovals(const Listener& l, const PolicySnapshot& p) {
    if (!l.approvals) return;
    const std::string by = "policy generation " + std::to_string(p.generation);
    for (const auto& a : l.approvals->pending()) {
      if (!heldBy(l, p, a)) continue;
      const auto verdict = decideAsked(p, a);
      if (verdict != AskedVerdict::kAsks)
        l.approvals->answer(a.id, verdict == AskedVerdict::kAllows, Scope::kOnce, by);
    }
  }

  // Whether approval `a` waits on a connection of `l`: its execution's (or session's), or on a
  // standalone listener (no execution) one of the workflow `p` replaces there.
  static bool heldBy(const Listener& l, const PolicySnapshot& p, const Approval& a) {
    if (!l.execution_id.empty())
      return a.execution_id == l.execution_id || a.session_id == l.execution_id;
    return a.execution_id.empty() && a.session_id.empty() && a.workflow == p.workflow().name;
  }

  void recordPolicy(const policy::Matcher& m) {
    if (!ctx_->sink) return;
    const auto& wf = m.workflow();
    ctx_->sink->recordPolicy(wf.sha256, wf.name, wf.yaml_text);
  }

  void add(std::shared_ptr<Listener> l) {
    ErrorCode ec;
    l->local = l->acceptor.local_endpoint(ec);
    {
      std::lock_guard lock(ctx_->endpoints_mu);
      ctx_->own_endpoints.push_back(l->local);
    }
    recordPolicy(*l->matcher());
    log().info("listening on {}:{} for workflow {}{}", l->local.address().to_string(),
               l->local.port(), l->matcher()->workflow().name,
               l->execution_id.empty() ? "" : " (execution " + l->execution_id + ")");
    {
      std::lock_guard lock(mu_);
      // One execution, one budget: its listeners (127.0.0.1 and [::1] in a sandbox) share the
      // account, so a second address family is not a second max_connections or byte budget.
      if (!l->execution_id.empty() && !l->clients)
        for (const auto& other : listeners_)
          if (other->execution_id == l->execution_id && !other->clients) {
            l->account = other->account;
            break;
          }
      listeners_.push_back(l);
    }
    const auto p = l->policy();
    l->account->notePolicy({p.generation, p.workflow().sha256, base::nowMs()});
    net::co_spawn(l->acceptor.get_executor(), acceptLoop(ctx_, l), net::detached);
  }

  // Closes (on their strands) and forgets the DNS endpoints `which` selects.
  template <typename Pred>
  void closeDns(Pred which) {
    std::vector<std::shared_ptr<dns::Endpoint>> es;
    {
      std::lock_guard lock(mu_);
      for (auto& e : dns_)
        if (which(*e)) es.push_back(e);
      std::erase_if(dns_, [&](const auto& e) { return which(*e); });
    }
    const bool running = started_ && !ioc_.stopped();
    for (auto& e : es) e->close(running);
  }

  void closeAcceptor(const std::shared_ptr<Listener>& l) {
    if (!started_ || ioc_.stopped()) {
      // Not running: nothing else touches the acceptor.
      ErrorCode ec;
      l->acceptor.close(ec);
      return;
    }
    // The acceptor belongs to the io_context threads; close it from there.
    auto done = std::make_shared<std::promise<void>>();
    auto fut = done->get_future();
    net::post(l->acceptor.get_executor(), [l, done] {
      ErrorCode ec;
      l->acceptor.close(ec);
      done->set_value();
    });
    fut.wait_for(std::chrono::seconds(2));
  }

  // Under mu_: the account of execution `id` (its first listener's; the others share it), or
  // null for none or an empty id.
  std::shared_ptr<Account> executionAccountLocked(const std::string& id) const {
    if (id.empty()) return nullptr;
    for (const auto& l : listeners_)
      if (l->execution_id == id) return l->account;
    return nullptr;
  }

  net::io_context ioc_;
  ResolvePool resolve_pool_;
  std::shared_ptr<Context> ctx_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  unsigned threads_count_ = 1;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Listener>> listeners_;

  std::vector<std::shared_ptr<dns::Endpoint>> dns_;     // sluice's DNS, one per execution
  std::vector<std::shared_ptr<blocked::Log>> blocked_;  // blocked-attempt logs, one each
  // Final counters of the most recently closed executions (their listeners are freed).
  static constexpr std::size_t kKeptStats = 64;
  std::deque<std::pair<std::string, Stats>> finished_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace

Proxy::~Proxy() = default;

std::expected<std::unique_ptr<Proxy>, Error> Proxy::create(ProxyOptions options,
                                                           std::shared_ptr<audit::EventSink> sink,
                                                           std::shared_ptr<Resolver> resolver) {
  if (options.max_header_bytes < 1024)
    return std::unexpected(
        Error{base::Code::kInvalidArgument, "max_header_bytes must be at least 1024"});
  unsigned threads =
      options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  std::shared_ptr<TlsContexts> tls;
  if (options.ca) {
    auto t = makeTlsContexts(options);
    if (!t) return std::unexpected(Error{base::Code::kInvalidArgument, t.error()});
    tls = std::move(*t);
  }
  auto impl = std::make_unique<ProxyImpl>(options, std::move(sink), std::move(resolver), threads);
  impl->setTls(std::move(tls));
  return impl;
}

}  // namespace sluice::proxy
