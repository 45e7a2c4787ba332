// Accounts (limits, receipt counters) and the shared proxy context.
#include "context.hpp"

namespace sluice::proxy {

namespace {
constexpr std::size_t kMaxDenials = 1000;

bool underLimit(std::uint64_t value, std::uint64_t limit) { return limit == 0 || value <= limit; }
}  // namespace

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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
                         const std::string& reason) {
  denied_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (denials_.size() < kMaxDenials) denials_.push_back(Denial{host, port, rule, reason});
}

void Account::addTo(Stats& stats) const {
  stats.allowed += allowed_.load();
  stats.denied += denied_.load();
  stats.bytes_out += bytes_out_.load();
  stats.bytes_in += bytes_in_.load();
  stats.requests += requests_.load();
  stats.connections += connections_.load();
  std::lock_guard lock(mu_);
  for (const auto& d : denials_) {
    if (stats.denials.size() >= kMaxDenials) break;
    stats.denials.push_back(d);
  }
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

std::string Context::newConnectionId(const std::string& execution_id) {
  auto n = next_id.fetch_add(1, std::memory_order_relaxed) + 1;
  std::string id = "c-";
  id += execution_id.empty() ? id_prefix : execution_id;
  id += '-';
  id += std::to_string(n);
  return id;
}

bool Context::isOwnEndpoint(const tcp::endpoint& ep) const {
  std::lock_guard lock(endpoints_mu);
  for (const auto& own : own_endpoints) {
    if (own.port() != ep.port()) continue;
    const auto& a = own.address();
    // A wildcard listener answers on every local address; any loopback or equal address
    // with its port is this proxy.
    if (a == ep.address() || a.is_unspecified() || ep.address().is_loopback()) return true;
  }
  return false;
}

}  // namespace sluice::proxy
