// Shared state of a running proxy: options, sink, resolver, per-listener accounts (limits and
// receipt counters) and the registry of live connections used by stop()/closeExecution().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy_snapshot.hpp"
#include "sluice/audit/event_sink.hpp"
#include "sluice/base/net.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {

/// Something that can be closed from another thread (posts to its own strand).
class Closable {
 public:
  virtual ~Closable() = default;
  virtual void abort() = 0;
  /// Closes the connection only if it is between requests (used when draining).
  virtual void closeIfIdle() {}
  /// A live policy update to `p`: closes a tunnel `p` no longer admits (policy_cut.hpp).
  virtual void redecide(const PolicySnapshot& p) { (void)p; }
};

/// Limits and counters of one listener (one execution), or of one client of a standalone
/// listener (see ClientBudgets). Updated from many strands.
class Account {
 public:
  /// `window` > 0: the request and byte counters start again from zero every `window` (a
  /// standalone proxy's per-client budget); 0: lifetime totals (an execution's).
  explicit Account(std::string execution_id, std::chrono::seconds window = {})
      : execution_id_(std::move(execution_id)), window_(window) {
    window_start_.store(nowNs(), std::memory_order_relaxed);
  }

  const std::string& executionId() const { return execution_id_; }

  /// The shadow policy whose decisions the rows charged here record (shadow.hpp); set once,
  /// before the listener accepts. Null: none.
  std::shared_ptr<const policy::Matcher> shadow;

  /// Takes a concurrent-connection slot; false when max_connections is reached.
  bool acquireConnection(const policy::EgressLimits& limits);
  void releaseConnection() { active_connections_.fetch_sub(1, std::memory_order_relaxed); }

  /// Counts one request; false when it exceeds max_requests.
  bool countRequest(const policy::EgressLimits& limits);

  /// Counts bytes; false when the total went over the limit (the caller ends the stream).
  bool addBytesOut(std::uint64_t n, const policy::EgressLimits& limits);
  bool addBytesIn(std::uint64_t n, const policy::EgressLimits& limits);
  /// True when either byte budget is already spent (new traffic is refused with 429).
  bool bytesExhausted(const policy::EgressLimits& limits) const;

  /// Counts one connections row, as it is written (audit_rows.cpp's recordConnectionRow: the
  /// one place), in `connections` and, when audit::countsAsAttempt, by its decision.
  void tally(const audit::ConnectionEvent& row);
  /// Counts one requests row, as it is written (RequestRecord::finish: the one place).
  void tally(const audit::RequestEvent& row);
  /// `count` denied connection attempts alike (the blocked-attempt log's, whose lost messages
  /// have no row each), in O(1) once the list of denials is full.
  void noteDenied(const std::string& host, std::uint16_t port, const std::string& rule,
                  const std::string& reason, std::uint64_t count = 1);
  /// One message to sluice's DNS (dns_server.cpp); `denied`: its row says deny.
  void noteDnsQuery(bool denied) {
    dns_queries_.fetch_add(1, std::memory_order_relaxed);
    if (denied) dns_denied_.fetch_add(1, std::memory_order_relaxed);
  }

  void addTo(Stats& stats) const;
  /// A policy generation came into force for this account (kept once per generation).
  void notePolicy(const PolicyGeneration& g);

  /// Live connections, so a whole execution can be closed at once.
  std::uint64_t registerLive(std::weak_ptr<Closable> c);
  void unregisterLive(std::uint64_t id);
  void abortAll();
  void closeIdle();
  /// Every live connection re-decides its open tunnel under `p` (Closable::redecide).
  void redecideAll(const PolicySnapshot& p);
  std::size_t liveCount() const;
  /// Concurrent upstream connections held now.
  std::uint64_t activeConnections() const {
    return active_connections_.load(std::memory_order_relaxed);
  }
  /// Starts a new budget window if the current one is over (no-op without a window).
  void roll();
  /// When this account was last given to a connection (for evicting idle client budgets).
  std::int64_t lastUsedNs() const { return last_used_ns_.load(std::memory_order_relaxed); }
  void touch() { last_used_ns_.store(nowNs(), std::memory_order_relaxed); }
  static std::int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  void note(audit::Decision decision, Denial what);

  std::string execution_id_;
  std::chrono::seconds window_{};
  std::atomic<std::int64_t> window_start_{0};
  std::atomic<std::int64_t> last_used_ns_{0};
  std::atomic<std::uint64_t> active_connections_{0};
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> bytes_out_{0};
  std::atomic<std::uint64_t> bytes_in_{0};
  std::atomic<std::uint64_t> allowed_{0};
  std::atomic<std::uint64_t> denied_{0};
  std::atomic<std::uint64_t> failed_{0};
  std::atomic<std::uint64_t> connections_{0};
  std::atomic<std::uint64_t> judged_requests_{0};
  std::atomic<std::uint64_t> dns_queries_{0};
  std::atomic<std::uint64_t> dns_denied_{0};
  std::atomic<std::uint64_t> would_deny_{0};
  mutable std::mutex mu_;
  std::vector<Denial> denials_;
  std::vector<Denial> failures_;
  std::vector<PolicyGeneration> generations_;
  std::uint64_t next_live_ = 0;
  std::unordered_map<std::uint64_t, std::weak_ptr<Closable>> live_;
};

/// A connection slot taken with Account::acquireConnection, released unless handed on.
class Slot {
 public:
  explicit Slot(Account* a) : a_(a) {}
  ~Slot() {
    if (a_) a_->releaseConnection();
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  void release() { a_ = nullptr; }

 private:
  Account* a_;
};

/// The budgets of a standalone listener's clients: one Account per client address (IPv6: per
/// /64, which one client may hold whole), each with its own window, so that one client that
/// spends its budget or holds its connections gets 429 while the others go on. At most
/// kMaxClients are tracked; idle ones are evicted first, and beyond that every new client
/// shares one overflow budget (a flood of source addresses cannot grow memory).
class ClientBudgets {
 public:
  static constexpr std::size_t kMaxClients = 4096;
  explicit ClientBudgets(std::chrono::seconds window) : window_(window) {}
  /// The shadow policy of every client's account (set once, before the listener accepts).
  void setShadow(std::shared_ptr<const policy::Matcher> m) { shadow_ = std::move(m); }
  std::shared_ptr<Account> accountFor(const net::ip::address& peer);
  /// Forgets every budget (SIGHUP reload): open connections keep theirs until they end.
  void reset();
  void forEach(const std::function<void(Account&)>& fn) const;
  std::size_t size() const;

 private:
  std::chrono::seconds window_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Account>> clients_;
  std::shared_ptr<const policy::Matcher> shadow_;  // each client's Account::shadow
  std::shared_ptr<Account> overflow_;
};

/// One listening socket and who it serves.
struct Listener {
  Listener(net::io_context& ioc, std::string exec_id, std::shared_ptr<const policy::Matcher> m)
      : acceptor(net::make_strand(ioc)),
        execution_id(std::move(exec_id)),
        account(std::make_shared<Account>(execution_id)),
        policy_{std::move(m), 1} {}

  /// The account a connection from `peer` is charged to: the listener's own, or the client's
  /// when budgets are per client.
  std::shared_ptr<Account> accountFor(const tcp::endpoint& peer) {
    return clients ? clients->accountFor(peer.address()) : account;
  }
  /// Every account of this listener (its own and its clients').
  void forEachAccount(const std::function<void(Account&)>& fn) const {
    fn(*account);
    if (clients) clients->forEach(fn);
  }

  /// The policy in force now: a decision takes one snapshot and stamps its rows with it.
  PolicySnapshot policy() const {
    std::lock_guard lock(mu_);
    return policy_;
  }
  std::shared_ptr<const policy::Matcher> matcher() const { return policy().matcher; }
  /// Swaps the whole policy (a live update or a reload).
  void setPolicy(PolicySnapshot p) {
    std::lock_guard lock(mu_);
    policy_ = std::move(p);
  }

  tcp::acceptor acceptor;  // on its own strand: the accept loop and close() never race
  std::string execution_id;
  tcp::endpoint local;
  std::shared_ptr<Account> account;
  /// Standalone listeners shared by many clients: budgets per client address (null: the whole
  /// listener is one execution's, `account`).
  std::unique_ptr<ClientBudgets> clients;
  // Credential injection for this execution (set once, before accepting).
  std::shared_ptr<const policy::SecretStore> secrets;
  std::vector<Placeholder> placeholders;
  // The execution's synthetic DNS names, for redirected connections (transparent.hpp); null:
  // connections are never taken for redirected ones.
  std::shared_ptr<SyntheticNames> names;
  // Approvals of ask-rule matches (approval_wait.hpp), and who approvers are told asked.
  std::shared_ptr<ApprovalDesk> approvals;
  std::string session_id;
  std::string caller;
  // Learn mode (ListenerIdentity::learn; set once, before accepting).
  bool learn = false;

 private:
  mutable std::mutex mu_;
  PolicySnapshot policy_;
};

/// Gives `l` (its accounts) the identity's shadow policy and learn mode.
void setShadowAndLearn(Listener& l, const ListenerIdentity& identity);

/// Which execution the audit rows of an owner's listeners, DNS and blocked-attempt log name:
/// the one running in it now (a session's exec, Proxy::setCurrentExecution), else the owner (the
/// listener's execution id) itself. Costs one atomic load while nothing is set.
class RowNames {
 public:
  std::string of(const std::string& owner) const {
    if (!any_.load(std::memory_order_acquire)) return owner;
    std::lock_guard lock(mu_);
    auto it = current_.find(owner);
    return it == current_.end() ? owner : it->second;
  }
  void set(const std::string& owner, const std::string& execution_id) {
    std::lock_guard lock(mu_);
    if (execution_id.empty() || execution_id == owner) {
      current_.erase(owner);
    } else {
      current_[owner] = execution_id;
    }
    any_.store(!current_.empty(), std::memory_order_release);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> current_;
  std::atomic<bool> any_{false};
};

struct TlsContexts;     // inspect.hpp: the server and upstream OpenSSL contexts
class TokenCache;       // token_source.hpp: bearer tokens minted at the proxy
class ParkedUpstreams;  // parked_upstreams.hpp: upstream TLS connections kept between tunnels

/// Threads for the blocking system resolver, started on first use: a `sluice run` whose
/// program connects nowhere starts none (four thread starts and joins were ~0.2 ms of CPU).
class ResolvePool {
 public:
  explicit ResolvePool(std::size_t threads) : threads_(threads) {}
  net::thread_pool& get() {
    std::lock_guard lock(mu_);
    if (!pool_) pool_ = std::make_unique<net::thread_pool>(threads_);
    return *pool_;
  }
  void join() {
    std::lock_guard lock(mu_);
    if (pool_) pool_->join();
  }

 private:
  std::mutex mu_;
  std::size_t threads_;
  std::unique_ptr<net::thread_pool> pool_;
};

/// What every connection of one proxy shares.
struct Context {
  ProxyOptions options;
  std::shared_ptr<audit::EventSink> sink;
  std::shared_ptr<Resolver> resolver;
  std::shared_ptr<TlsContexts> tls;         // null when no CA: inspect rules are refused
  std::shared_ptr<ParkedUpstreams> parked;  // inspected tunnels' idle upstream connections
  std::shared_ptr<TokenCache> tokens;       // one per process: tokens are shared by its listeners
  ResolvePool* resolve_pool = nullptr;
  std::string id_prefix;  // random per process, so connection ids are unique across restarts
  std::shared_ptr<RowNames> row_names = std::make_shared<RowNames>();
  std::atomic<std::uint64_t> next_id{0};
  bool single_thread = false;  // one I/O thread: it serialises everything, no strands needed
  std::atomic<bool> draining{false};
  std::atomic<std::int64_t> live{0};  // sessions + tunnels, for drain

  mutable std::mutex endpoints_mu;
  std::vector<tcp::endpoint> own_endpoints;  // listeners, for the loop guard

  std::string newConnectionId(const std::string& execution_id);
  /// True when dialling `ep` would reach one of this proxy's own listeners.
  bool isOwnEndpoint(const tcp::endpoint& ep) const;
  bool auditHealthy() const { return !sink || sink->healthy(); }
};

}  // namespace sluice::proxy
