// Verified upstream TLS connections kept between tunnels (parked_upstreams.hpp).
#include "parked_upstreams.hpp"

#include <poll.h>

#include <algorithm>

#include "link.hpp"

namespace sluice::proxy {

struct ParkedUpstreams::Entry {
  Entry(std::shared_ptr<Account> a, const policy::Target& t, const tcp::endpoint& ep, SslStream s,
        std::string by)
      : account(std::move(a)),
        host(t.host),
        port(t.port),
        endpoint(ep),
        stream(std::move(s)),
        timer(stream.get_executor()),
        opened_by(std::move(by)) {}
  std::shared_ptr<Account> account;  // the key's owner, kept while parked
  std::string host;
  std::uint16_t port;
  tcp::endpoint endpoint;
  SslStream stream;
  net::steady_timer timer;  // the idle limit, on the stream's executor
  std::string opened_by;
  bool gone = false;  // taken, expired or dropped (under mu_)
};

bool ParkedUpstreams::quiet(SslStream& stream) {
  auto& sock = beast::get_lowest_layer(stream);
  if (!sock.is_open() || hasUnread(stream)) return false;
  // Nothing to read, and no end of stream (the upstream's idle close) either.
  pollfd p{sock.native_handle(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0;
}

void ParkedUpstreams::park(std::shared_ptr<Account> account, const policy::Target& target,
                           const tcp::endpoint& endpoint, SslStream stream, std::string opened_by) {
  auto e = std::make_shared<Entry>(std::move(account), target, endpoint, std::move(stream),
                                   std::move(opened_by));
  if (idle_.count() <= 0 || !quiet(e->stream)) {
    close(e);
    return;
  }
  std::shared_ptr<Entry> evicted;
  {
    std::lock_guard lock(mu_);
    const auto mine = [&](const std::shared_ptr<Entry>& o) { return o->account == e->account; };
    const auto same = [&](const std::shared_ptr<Entry>& o) {
      return mine(o) && o->host == e->host && o->port == e->port;
    };
    if (static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), same)) >=
        kPerKey) {
      close(e);
      return;
    }
    // Who makes room: this account's oldest when it is at its share, else the oldest of all
    // when every place is taken.
    auto room = entries_.end();
    if (static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), mine)) >=
        kPerAccount) {
      room = std::find_if(entries_.begin(), entries_.end(), mine);
    } else if (entries_.size() >= kTotal) {
      room = entries_.begin();
    }
    if (room != entries_.end()) {
      evicted = *room;
      evicted->gone = true;
      entries_.erase(room);
    }
    entries_.push_back(e);
  }
  if (evicted) close(evicted);
  e->timer.expires_after(idle_);
  e->timer.async_wait([weak = weak_from_this(), e](const ErrorCode& ec) {
    if (ec) return;  // the io_context is going away
    if (auto self = weak.lock()) self->expire(e);
  });
}

std::optional<ParkedUpstreams::Taken> ParkedUpstreams::take(
    const Account& account, const policy::Target& target,
    const std::vector<VettedAddress>& vetted) {
  std::vector<std::shared_ptr<Entry>> stale;
  std::shared_ptr<Entry> found;
  const VettedAddress* address = nullptr;
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.end(); it != entries_.begin();) {
      --it;
      const auto& e = *it;
      if (e->account.get() != &account || e->host != target.host || e->port != target.port)
        continue;
      auto v = std::find_if(vetted.begin(), vetted.end(),
                            [&](const VettedAddress& a) { return a.endpoint == e->endpoint; });
      if (v == vetted.end()) continue;
      e->gone = true;
      if (!quiet(e->stream)) {  // the upstream closed it, or sent what nobody asked for
        stale.push_back(e);
        it = entries_.erase(it);
        continue;
      }
      found = e;
      address = &*v;
      entries_.erase(it);
      break;
    }
  }
  for (auto& e : stale) close(e);
  if (!found) return std::nullopt;
  // Its timer is left to fire: the entry is gone, so expire() does nothing (cancelling it from
  // here could race its handler on the parking connection's strand).
  return Taken{std::move(found->stream), *address, std::move(found->opened_by)};
}

void ParkedUpstreams::expire(const std::shared_ptr<Entry>& e) {
  {
    std::lock_guard lock(mu_);
    if (e->gone) return;
    e->gone = true;
    entries_.remove(e);
  }
  close(e);  // on the entry's own executor
}

// Closes a connection no one else can reach any more (gone, out of the list): its socket has
// no operation pending, so any thread may. Its timer, if armed, fires later and finds it gone.
void ParkedUpstreams::close(const std::shared_ptr<Entry>& e) {
  ErrorCode ignored;
  beast::get_lowest_layer(e->stream).close(ignored);
}

void ParkedUpstreams::dropAccount(const Account& account) {
  std::vector<std::shared_ptr<Entry>> dropped;
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if ((*it)->account.get() == &account) {
        (*it)->gone = true;
        dropped.push_back(*it);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& e : dropped) close(e);
}

void ParkedUpstreams::clear() {
  std::list<std::shared_ptr<Entry>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(entries_);
    for (auto& e : all) e->gone = true;
  }
  for (auto& e : all) close(e);
}

}  // namespace sluice::proxy
