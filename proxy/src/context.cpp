// Accounts (limits, receipt counters) and the shared proxy context.
#include "context.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstring>

#include "sluice/audit/event_text.hpp"
#include "sluice/base/clock.hpp"

namespace sluice::proxy {

namespace {
constexpr std::size_t kMaxDenials = 1000;

bool underLimit(std::uint64_t value, std::uint64_t limit) { return limit == 0 || value <= limit; }
}  // namespace

void Account::roll() {
  if (window_.count() == 0) return;
  const std::int64_t now = nowNs();
  std::int64_t start = window_start_.load(std::memory_order_relaxed);
  const std::int64_t length = std::chrono::duration_cast<std::chrono::nanoseconds>(window_).count();
  if (now - start < length) return;
  // One thread wins the roll; the counters start again (connections held stay held).
  if (!window_start_.compare_exchange_strong(start, now, std::memory_order_relaxed)) return;
  requests_.store(0, std::memory_order_relaxed);
  bytes_out_.store(0, std::memory_order_relaxed);
  bytes_in_.store(0, std::memory_order_relaxed);
}

std::shared_ptr<Account> ClientBudgets::accountFor(const net::ip::address& peer) {
  // An IPv4-mapped IPv6 peer is the IPv4 client; an IPv6 client is keyed by its /64.
  std::string key;
  if (peer.is_v6() && peer.to_v6().is_v4_mapped()) {
    key = net::ip::make_address_v4(net::ip::v4_mapped, peer.to_v6()).to_string();
  } else if (peer.is_v6()) {
    auto bytes = peer.to_v6().to_bytes();
    for (std::size_t i = 8; i < bytes.size(); ++i) bytes[i] = 0;
    key = net::ip::address_v6(bytes).to_string() + "/64";
  } else {
    key = peer.to_string();
  }
  std::lock_guard lock(mu_);
  auto it = clients_.find(key);
  if (it == clients_.end()) {
    if (clients_.size() >= kMaxClients) {
      // Evict budgets no connection holds and whose window is over.
      const std::int64_t cutoff =
          Account::nowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(window_).count();
      std::erase_if(clients_, [cutoff](const auto& kv) {
        return kv.second.use_count() == 1 && kv.second->lastUsedNs() < cutoff;
      });
    }
    if (clients_.size() >= kMaxClients) {
      if (!overflow_) {
        overflow_ = std::make_shared<Account>("", window_);
        overflow_->shadow = shadow_;
      }
      overflow_->roll();
      overflow_->touch();
      return overflow_;
    }
    it = clients_.emplace(key, std::make_shared<Account>("", window_)).first;
    it->second->shadow = shadow_;
  }
  it->second->roll();
  it->second->touch();
  return it->second;
}

void ClientBudgets::reset() {
  std::lock_guard lock(mu_);
  clients_.clear();
  overflow_.reset();
}

void ClientBudgets::forEach(const std::function<void(Account&)>& fn) const {
  std::vector<std::shared_ptr<Account>> all;
  {
    std::lock_guard lock(mu_);
    all.reserve(clients_.size() + 1);
    for (const auto& [key, a] : clients_) all.push_back(a);
    if (overflow_) all.push_back(overflow_);
  }
  for (auto& a : all) fn(*a);
}

std::size_t ClientBudgets::size() const {
  std::lock_guard lock(mu_);
  return clients_.size();
}

bool Account::acquireConnection(const policy::EgressLimits& limits) {
  auto prev = active_connections_.fetch_add(1, std::memory_order_relaxed);
  if (limits.max_connections != 0 && prev >= limits.max_connections) {
    active_connections_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool Account::countRequest(const policy::EgressLimits& limits) {
  roll();
  auto n = requests_.fetch_add(1, std::memory_order_relaxed) + 1;
  return underLimit(n, limits.max_requests);
}

bool Account::addBytesOut(std::uint64_t n, const policy::EgressLimits& limits) {
  auto total = bytes_out_.fetch_add(n, std::memory_order_relaxed) + n;
  return underLimit(total, limits.max_bytes_out);
}

bool Account::addBytesIn(std::uint64_t n, const policy::EgressLimits& limits) {
  auto total = bytes_in_.fetch_add(n, std::memory_order_relaxed) + n;
  return underLimit(total, limits.max_bytes_in);
}

bool Account::bytesExhausted(const policy::EgressLimits& limits) const {
  auto out = bytes_out_.load(std::memory_order_relaxed);
  auto in = bytes_in_.load(std::memory_order_relaxed);
  return (limits.max_bytes_out != 0 && out >= limits.max_bytes_out) ||
         (limits.max_bytes_in != 0 && in >= limits.max_bytes_in);
}

void Account::noteDenied(const std::string& host, std::uint16_t port, const std::string& rule,
                         const std::string& reason, std::uint64_t count) {
  denied_.fetch_add(count, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  for (; count > 0 && denials_.size() < kMaxDenials; --count)
    denials_.push_back(Denial{host, port, rule, reason, {}, {}});
}

void Account::tally(const audit::ConnectionEvent& row) {
  connections_.fetch_add(1, std::memory_order_relaxed);
  if (!audit::countsAsAttempt(row.kind, row.decision, row.tls)) return;
  note(row.decision, Denial{row.host, row.port, row.rule_id, row.reason, {}, {}});
}

void Account::tally(const audit::RequestEvent& row) {
  judged_requests_.fetch_add(1, std::memory_order_relaxed);
  note(row.decision, Denial{row.host, row.port, row.rule_id, row.reason, row.method, row.path});
}

void Account::note(audit::Decision decision, Denial what) {
  switch (decision) {
    case audit::Decision::kAllow:
      allowed_.fetch_add(1, std::memory_order_relaxed);
      return;
    case audit::Decision::kWouldDeny:  // let through by a learning run: counted as allowed
      allowed_.fetch_add(1, std::memory_order_relaxed);
      would_deny_.fetch_add(1, std::memory_order_relaxed);
      return;
    case audit::Decision::kDeny: {
      denied_.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(mu_);
      if (denials_.size() < kMaxDenials) denials_.push_back(std::move(what));
      return;
    }
    case audit::Decision::kFail: {
      failed_.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(mu_);
      if (failures_.size() < kMaxDenials) failures_.push_back(std::move(what));
      return;
    }
  }
}

void Account::addTo(Stats& stats) const {
  stats.allowed += allowed_.load();
  stats.denied += denied_.load();
  stats.failed += failed_.load();
  stats.bytes_out += bytes_out_.load();
  stats.bytes_in += bytes_in_.load();
  stats.requests += judged_requests_.load();
  stats.connections += connections_.load();
  stats.dns_queries += dns_queries_.load();
  stats.dns_denied += dns_denied_.load();
  stats.would_deny += would_deny_.load();
  std::lock_guard lock(mu_);
  for (const auto& d : denials_) {
    if (stats.denials.size() >= kMaxDenials) break;
    stats.denials.push_back(d);
  }
  for (const auto& f : failures_) {
    if (stats.failures.size() >= kMaxDenials) break;
    stats.failures.push_back(f);
  }
  for (const auto& g : generations_)
    if (stats.policy_generations.size() < kMaxDenials) stats.policy_generations.push_back(g);
}

void Account::notePolicy(const PolicyGeneration& g) {
  std::lock_guard lock(mu_);
  for (const auto& known : generations_)
    if (known.generation == g.generation) return;
  if (generations_.size() < kMaxDenials) generations_.push_back(g);
}

std::uint64_t Account::registerLive(std::weak_ptr<Closable> c) {
  std::lock_guard lock(mu_);
  auto id = ++next_live_;
  live_.emplace(id, std::move(c));
  return id;
}

void Account::unregisterLive(std::uint64_t id) {
  std::lock_guard lock(mu_);
  live_.erase(id);
}

void Account::abortAll() {
  std::vector<std::shared_ptr<Closable>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, weak] : live_)
      if (auto c = weak.lock()) all.push_back(std::move(c));
  }
  for (auto& c : all) c->abort();
}

void Account::redecideAll(const PolicySnapshot& p) {
  std::vector<std::shared_ptr<Closable>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, weak] : live_)
      if (auto c = weak.lock()) all.push_back(std::move(c));
  }
  for (auto& c : all) c->redecide(p);
}

std::size_t Account::liveCount() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

void Account::closeIdle() {
  std::vector<std::shared_ptr<Closable>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, weak] : live_)
      if (auto c = weak.lock()) all.push_back(std::move(c));
  }
  for (auto& c : all) c->closeIfIdle();
}

std::string Context::newConnectionId(const std::string& execution_id) {
  auto n = next_id.fetch_add(1, std::memory_order_relaxed) + 1;
  std::string id = "c-";
  id += execution_id.empty() ? id_prefix : execution_id;
  id += '-';
  id += std::to_string(n);
  return id;
}

bool Context::isOwnEndpoint(const tcp::endpoint& ep) const {
  bool wildcard_on_port = false;
  {
    std::lock_guard lock(endpoints_mu);
    for (const auto& own : own_endpoints) {
      if (own.port() != ep.port()) continue;
      if (own.address() == ep.address() || ep.address().is_loopback()) return true;
      if (own.address().is_unspecified()) wildcard_on_port = true;
    }
  }
  if (!wildcard_on_port) return false;
  // A wildcard listener answers on every local address: is `ep` one of this host's? Asked
  // only when the port matches such a listener, so the netlink round trip is rare.
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return true;  // cannot tell: refuse rather than loop
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET && ep.address().is_v4()) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      local = ntohl(sin->sin_addr.s_addr) == ep.address().to_v4().to_uint();
    } else if (i->ifa_addr->sa_family == AF_INET6 && ep.address().is_v6()) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      auto bytes = ep.address().to_v6().to_bytes();
      local = std::memcmp(sin6->sin6_addr.s6_addr, bytes.data(), 16) == 0;
    }
  }
  ::freeifaddrs(list);
  return local;
}

void setShadowAndLearn(Listener& l, const ListenerIdentity& identity) {
  l.learn = identity.learn;
  l.account->shadow = identity.shadow;
  if (l.clients) l.clients->setShadow(identity.shadow);
}

}  // namespace sluice::proxy
