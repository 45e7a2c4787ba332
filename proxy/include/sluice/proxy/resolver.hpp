// Name resolution for the proxy, behind an interface so tests (and the runner) can map
// names to addresses without touching /etc/hosts or a DNS server.
#pragma once

#include <expected>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/policy/ip_address.hpp"

namespace sluice::proxy {

/// Resolves a host name to addresses. Called from a small dedicated thread pool (never from
/// an I/O thread), so a blocking implementation is fine. Must be thread-safe.
class Resolver {
 public:
  virtual ~Resolver();

  /// Every address `host` resolves to (IPv4 and IPv6), or a message saying why not.
  /// `host` is already normalised (lower-case, no trailing dot) and is never an IP literal.
  virtual std::expected<std::vector<policy::IpAddress>, std::string> resolve(
      const std::string& host) = 0;
};

/// The system resolver (getaddrinfo).
std::shared_ptr<Resolver> systemResolver();

/// A fixed name -> addresses map; unknown names fail ("no such host"). For tests and for
/// deployments that pin names.
class StaticResolver : public Resolver {
 public:
  void add(const std::string& host, std::vector<policy::IpAddress> addresses);
  std::expected<std::vector<policy::IpAddress>, std::string> resolve(
      const std::string& host) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<policy::IpAddress>> map_;
};

}  // namespace sluice::proxy
