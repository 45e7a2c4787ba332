// ParkedUpstreams's shares (parked_upstreams.hpp): the places for upstream connections kept
// between inspected tunnels are shared by every account of a proxy, so a caller greedy for
// them (one execution opening tunnels to many targets) must not take them all and evict every
// other account's connections. Real loopback TCP connections, wrapped as the proxy wraps them.
#include "parked_upstreams.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace sluice::proxy {
namespace {

class ParkedUpstreamsTest : public ::testing::Test {
 protected:
  /// A client stream connected to the test's listener, its peer kept open (so it is quiet).
  SslStream connected() {
    SslStream s(io_, tls_);
    s.next_layer().connect(acceptor_.local_endpoint());
    peers_.emplace_back(io_);
    acceptor_.accept(peers_.back());
    return s;
  }

  static policy::Target target(int i) {
    policy::Target t;
    t.host = "t" + std::to_string(i) + ".example";
    t.port = 443;
    return t;
  }

  /// Takes every connection of `account` parked for `t`; how many there were.
  std::size_t takeAll(const Account& account, const policy::Target& t) {
    const std::vector<VettedAddress> vetted{{acceptor_.local_endpoint(), {}, {}}};
    std::size_t n = 0;
    while (parked_->take(account, t, vetted)) ++n;
    return n;
  }

  net::io_context io_;
  net::ssl::context tls_{net::ssl::context::tls_client};
  tcp::acceptor acceptor_{io_, {net::ip::make_address("127.0.0.1"), 0}};
  std::vector<tcp::socket> peers_;
  std::shared_ptr<ParkedUpstreams> parked_ =
      std::make_shared<ParkedUpstreams>(std::chrono::seconds(60));
};

TEST_F(ParkedUpstreamsTest, AGreedyAccountMakesRoomAmongItsOwnAndEvictsNoOneElse) {
  auto other = std::make_shared<Account>("ex-other");
  auto greedy = std::make_shared<Account>("ex-greedy");
  const auto endpoint = acceptor_.local_endpoint();
  parked_->park(other, target(100), endpoint, connected(), "c-other");
  // More targets than the whole proxy has places for, each up to its per-target cap.
  constexpr int kTargets = ParkedUpstreams::kTotal / ParkedUpstreams::kPerKey + 2;
  for (int t = 0; t < kTargets; ++t) {
    for (std::size_t i = 0; i < ParkedUpstreams::kPerKey; ++i)
      parked_->park(greedy, target(t), endpoint, connected(), "c-greedy");
  }
  EXPECT_EQ(takeAll(*other, target(100)), 1u) << "the greedy account evicted another's";
  // The greedy account kept its share, its most recently parked: the last targets' in full.
  std::size_t kept = 0;
  for (int t = 0; t < kTargets; ++t) {
    const std::size_t n = takeAll(*greedy, target(t));
    const bool recent =
        t >= kTargets - static_cast<int>(ParkedUpstreams::kPerAccount / ParkedUpstreams::kPerKey);
    EXPECT_EQ(n, recent ? ParkedUpstreams::kPerKey : 0u) << "target " << t;
    kept += n;
  }
  EXPECT_EQ(kept, ParkedUpstreams::kPerAccount);
  parked_->clear();
}

TEST_F(ParkedUpstreamsTest, AccountsWithinTheirShareFillThePlacesAndTheOldestMakesRoom) {
  const auto endpoint = acceptor_.local_endpoint();
  constexpr std::size_t kAccounts = ParkedUpstreams::kTotal / ParkedUpstreams::kPerAccount + 1;
  std::vector<std::shared_ptr<Account>> accounts;
  for (std::size_t a = 0; a < kAccounts; ++a) {
    accounts.push_back(std::make_shared<Account>("ex-" + std::to_string(a)));
    for (std::size_t i = 0; i < ParkedUpstreams::kPerAccount; ++i) {
      parked_->park(accounts.back(), target(static_cast<int>(i / ParkedUpstreams::kPerKey)),
                    endpoint, connected(), "c");
    }
  }
  // The proxy's places are full: the first account's, parked first, made room for the last's.
  std::size_t total = 0;
  for (std::size_t a = 0; a < kAccounts; ++a) {
    std::size_t n = 0;
    for (int t = 0; t < 2; ++t) n += takeAll(*accounts[a], target(t));
    EXPECT_EQ(n, a == 0 ? 0u : ParkedUpstreams::kPerAccount) << "account " << a;
    total += n;
  }
  EXPECT_EQ(total, ParkedUpstreams::kTotal);
  parked_->clear();
}

}  // namespace
}  // namespace sluice::proxy
