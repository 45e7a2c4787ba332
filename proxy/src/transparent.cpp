// Transparent capture helpers (transparent.hpp).
#include "transparent.hpp"

#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "upstream_dial.hpp"

namespace sluice::proxy {

std::optional<tcp::endpoint> originalDestination(tcp::socket& s) {
  ErrorCode ec;
  auto local = s.local_endpoint(ec);
  if (ec) return std::nullopt;
  const int fd = s.native_handle();
  tcp::endpoint dst;
  if (local.address().is_v4()) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &a, &len) != 0) return std::nullopt;
    dst = tcp::endpoint(net::ip::address_v4(ntohl(a.sin_addr.s_addr)), ntohs(a.sin_port));
  } else {
    sockaddr_in6 a{};
    socklen_t len = sizeof a;
    if (::getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &a, &len) != 0) return std::nullopt;
    net::ip::address_v6::bytes_type bytes;
    std::copy(std::begin(a.sin6_addr.s6_addr), std::end(a.sin6_addr.s6_addr), bytes.begin());
    dst = tcp::endpoint(net::ip::address_v6(bytes), ntohs(a.sin6_port));
  }
  if (dst == local) return std::nullopt;  // not redirected: an explicit proxy client
  return dst;
}

std::string transparentHost(const tcp::endpoint& dst, const SyntheticNames* names,
                            const NameInOpening& from_opening) {
  const auto addr = dst.address();
  if (names) {
    if (auto name = names->nameOf(toIpAddress(dst))) return *name;
  }
  if (from_opening.status == Peeked::kFound) return from_opening.name;
  return addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
}

}  // namespace sluice::proxy
