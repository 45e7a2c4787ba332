// The system resolver (getaddrinfo) and the static map used by tests.
#include "sluice/proxy/resolver.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace sluice::proxy {

Resolver::~Resolver() = default;

namespace {

class SystemResolver : public Resolver {
 public:
  std::expected<std::vector<policy::IpAddress>, std::string> resolve(
      const std::string& host) override {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    // AI_ADDRCONFIG would hide ::1-only answers on v4-only hosts; we want every address so
    // the SSRF guard sees all of them.
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0) return std::unexpected("cannot resolve " + host + ": " + gai_strerror(rc));
    std::vector<policy::IpAddress> out;
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      policy::IpAddress addr;
      if (ai->ai_family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
        addr = policy::IpAddress::v4(ntohl(sin->sin_addr.s_addr));
      } else if (ai->ai_family == AF_INET6) {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
        std::array<std::uint8_t, 16> bytes{};
        std::memcpy(bytes.data(), sin6->sin6_addr.s6_addr, 16);
        addr = policy::IpAddress::v6(bytes);
      } else {
        continue;
      }
      if (std::find(out.begin(), out.end(), addr) == out.end()) out.push_back(addr);
    }
    ::freeaddrinfo(res);
    if (out.empty()) return std::unexpected("cannot resolve " + host + ": no addresses");
    return out;
  }
};

}  // namespace

std::shared_ptr<Resolver> systemResolver() { return std::make_shared<SystemResolver>(); }

void StaticResolver::add(const std::string& host, std::vector<policy::IpAddress> addresses) {
  std::lock_guard lock(mu_);
  map_[host] = std::move(addresses);
}

std::expected<std::vector<policy::IpAddress>, std::string> StaticResolver::resolve(
    const std::string& host) {
  std::lock_guard lock(mu_);
  auto it = map_.find(host);
  if (it == map_.end() || it->second.empty())
    return std::unexpected("cannot resolve " + host + ": no such host");
  return it->second;
}

}  // namespace sluice::proxy
