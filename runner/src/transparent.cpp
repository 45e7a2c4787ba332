// Transparent capture, the sandbox's side (see transparent.hpp).
#include "transparent.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "launch.hpp"
#include "namespaces.hpp"

namespace sluice::runner::detail {
namespace {

// Output: the nat chain runs first (priority -100), so the filter chain sees a redirected
// connection with its new, loopback destination. Loopback traffic stays as it is (the
// sandbox's own processes may talk among themselves, over UDP too: nothing on lo leaves the
// namespace). What still goes to a non-loopback address (UDP, QUIC, ICMP, any other protocol)
// is rejected: dropped in the output path, so the sending call fails at once (EPERM) instead of
// waiting for a timeout, and a QUIC client falls back to TCP, which is redirected. Protocols
// are numbers (6 tcp, 17 udp, 1 icmp, 58 ipv6-icmp): names cost libnftables a getprotobyname()
// through NSS, and an anonymous set one more kernel object (about 0.1 ms together).
constexpr char kRules[] = R"(table inet sluice {
  chain nat_output {
    type nat hook output priority -100; policy accept;
    meta l4proto 6 ip daddr != 127.0.0.0/8 redirect to :3128
    meta l4proto 6 ip6 daddr != ::1 redirect to :3128
  }
  chain filter_output {
    type filter hook output priority 0; policy accept;
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    meta l4proto 17 reject
    meta l4proto 1 reject
    meta l4proto 58 reject
    reject
  }
}
)";

SetupError stepError(const char* step, int err) { return setupError(step, std::strerror(err)); }

std::expected<struct stat, int> statNetns(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return std::unexpected(errno);
  return st;
}

bool sameNamespace(int ns, const struct stat& other) {
  struct stat st {};
  return ::fstat(ns, &st) == 0 && st.st_ino == other.st_ino && st.st_dev == other.st_dev;
}

void addAttr(nlmsghdr* nh, unsigned short type, const void* data, unsigned short len) {
  auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(nh) + NLMSG_ALIGN(nh->nlmsg_len));
  a->rta_type = type;
  a->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
  std::memcpy(RTA_DATA(a), data, len);
  nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + RTA_ALIGN(a->rta_len);
}

// RTM_NEWROUTE "default dev lo" (IPv4 with source 127.0.0.1, so a socket's local address is a
// real one): without a route, connect() to a non-loopback address fails with ENETUNREACH
// before the nat rule could see a packet.
std::expected<void, int> addDefaultRoute(int nl, unsigned char family, int lo, unsigned seq) {
  alignas(nlmsghdr) char buf[256] = {};
  auto* nh = reinterpret_cast<nlmsghdr*>(buf);
  nh->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  nh->nlmsg_type = RTM_NEWROUTE;
  nh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  nh->nlmsg_seq = seq;
  auto* rt = static_cast<rtmsg*>(NLMSG_DATA(nh));
  rt->rtm_family = family;
  rt->rtm_table = RT_TABLE_MAIN;
  rt->rtm_protocol = RTPROT_BOOT;
  rt->rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
  rt->rtm_type = RTN_UNICAST;
  addAttr(nh, RTA_OIF, &lo, sizeof lo);
  if (family == AF_INET) {
    const in_addr src{htonl(INADDR_LOOPBACK)};
    addAttr(nh, RTA_PREFSRC, &src, sizeof src);
  }
  if (::send(nl, buf, nh->nlmsg_len, 0) != static_cast<ssize_t>(nh->nlmsg_len))
    return std::unexpected(errno);
  alignas(nlmsghdr) char reply[512];
  for (;;) {
    const ssize_t n = ::recv(nl, reply, sizeof reply, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr)))) return std::unexpected(EPROTO);
    const auto* r = reinterpret_cast<const nlmsghdr*>(reply);
    if (r->nlmsg_seq != seq) continue;
    if (r->nlmsg_type != NLMSG_ERROR) return std::unexpected(EPROTO);
    const int err = static_cast<const nlmsgerr*>(NLMSG_DATA(r))->error;
    if (err != 0) return std::unexpected(-err);
    return {};
  }
}

std::expected<void, SetupError> addRoutes() {
  Fd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!nl) return std::unexpected(stepError("route netlink socket", errno));
  const int lo = static_cast<int>(::if_nametoindex("lo"));
  if (lo == 0) return std::unexpected(stepError("find lo", errno));
  if (auto r = addDefaultRoute(nl.get(), AF_INET, lo, 1); !r)
    return std::unexpected(stepError("IPv4 default route via lo", r.error()));
  if (auto r = addDefaultRoute(nl.get(), AF_INET6, lo, 2); !r)
    return std::unexpected(stepError("IPv6 default route via lo", r.error()));
  return {};
}

// One libnftables run (about 0.6 ms). Serialised: libnftables keeps some state per process
// (its symbol tables are read on first use), and parallel runs gain nothing.
std::expected<void, SetupError> addRules() {
  static std::mutex mu;
  std::lock_guard lock(mu);
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return std::unexpected(setupError("nftables rules", "nft_ctx_new failed"));
  // Nothing of libnftables goes to sluice's stdout or stderr; errors are reported.
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  const int rc = nft_run_cmd_from_buffer(ctx, kRules);
  std::string err = rc == 0 ? "" : nft_ctx_get_error_buffer(ctx);
  nft_ctx_free(ctx);
  if (rc != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return std::unexpected(setupError("nftables rules", err.empty() ? "failed" : err));
  }
  return {};
}

// A socket of `type` bound to `addr` (listening if a stream socket), as the proxy listener is.
Fd boundSocket(const sockaddr* addr, socklen_t len, int type) {
  Fd s(::socket(addr->sa_family, type | SOCK_CLOEXEC, 0));
  if (!s) return s;
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // [::1]:3128 is the IPv6 listener only; 127.0.0.1:3128 is init's IPv4 one.
  if (addr->sa_family == AF_INET6 &&
      ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)
    return Fd();
  if (::bind(s.get(), addr, len) != 0) return Fd();
  if (type == SOCK_STREAM && ::listen(s.get(), 128) != 0) return Fd();
  return s;
}

std::expected<void, SetupError> makeSockets(bool dns, CaptureSockets& out) {
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(kProxyPort);
  v6.sin6_addr = in6addr_loopback;
  out.listener6 = boundSocket(reinterpret_cast<sockaddr*>(&v6), sizeof v6, SOCK_STREAM);
  if (!out.listener6) return std::unexpected(stepError("proxy listener [::1]:3128", errno));
  if (!dns) return {};
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(kDnsPort);
  ::inet_pton(AF_INET, kDnsAddress, &v4.sin_addr);
  out.dns_udp = boundSocket(reinterpret_cast<sockaddr*>(&v4), sizeof v4, SOCK_DGRAM);
  if (!out.dns_udp) return std::unexpected(stepError("DNS socket 127.0.0.53:53/udp", errno));
  out.dns_tcp = boundSocket(reinterpret_cast<sockaddr*>(&v4), sizeof v4, SOCK_STREAM);
  if (!out.dns_tcp) return std::unexpected(stepError("DNS socket 127.0.0.53:53/tcp", errno));
  return {};
}

// On the capture thread: into the sandbox's namespace (this thread only), then every step.
CaptureResult setUp(int netns, bool dns) {
  const auto began = std::chrono::steady_clock::now();
  if (::setns(netns, CLONE_NEWNET) != 0)
    return std::unexpected(stepError("join the sandbox's network namespace", errno));
  // Init brings lo up too; whichever comes first, routes via lo need it up.
  if (auto r = bringUpLoopback(); !r) return std::unexpected(stepError(r.step, r.err));
  if (auto r = addRoutes(); !r) return std::unexpected(r.error());
  if (auto r = addRules(); !r) return std::unexpected(r.error());
  CaptureSockets out;
  if (auto r = makeSockets(dns, out); !r) return std::unexpected(r.error());
  out.took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - began)
                    .count();
  return out;
}

std::future<CaptureResult> failed(SetupError e) {
  std::promise<CaptureResult> p;
  p.set_value(std::unexpected(std::move(e)));
  return p.get_future();
}

}  // namespace

std::future<CaptureResult> startCapture(pid_t init, bool dns) {
  const std::string path = "/proc/" + std::to_string(init) + "/ns/net";
  Fd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return failed(stepError("open the sandbox's network namespace", errno));
  auto ours = statNetns("/proc/thread-self/ns/net");
  if (!ours) return failed(stepError("read sluice's network namespace", ours.error()));
  if (sameNamespace(ns.get(), *ours))
    return failed(setupError("open the sandbox's network namespace",
                             "it is sluice's own, not the sandbox's"));
  // The thread ends after the set-up, and with it the only task that joined the namespace.
  return std::async(
      std::launch::async, [](Fd fd, bool with_dns) { return setUp(fd.get(), with_dns); },
      std::move(ns), dns);
}

std::future<CaptureResult> startCaptureInHelper(pid_t helper, bool dns) {
  // A pidfd tells whether the helper still runs: a namespace opened through /proc/PID while it
  // does is the helper's, not that of a process that got its pid after it was reaped.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, helper, 0)));
  if (!pidfd) return failed(stepError(kHelperGone, errno));
  auto ours = statNetns("/proc/thread-self/ns/net");
  if (!ours) return failed(stepError("read sluice's network namespace", ours.error()));
  auto work = [](Fd pid_fd, pid_t pid, struct stat host, bool with_dns) -> CaptureResult {
    const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (;;) {
      Fd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      pollfd exited{pid_fd.get(), POLLIN, 0};
      if (!ns || ::poll(&exited, 1, 0) != 0)
        return std::unexpected(setupError(kHelperGone, "exited before capture was set up"));
      if (!sameNamespace(ns.get(), host)) return setUp(ns.get(), with_dns);
      if (std::chrono::steady_clock::now() > deadline)
        return std::unexpected(setupError("open the sandbox's network namespace",
                                          "the namespace helper did not make it within 1 s"));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  };
  return std::async(std::launch::async, work, std::move(pidfd), helper, *ours, dns);
}

}  // namespace sluice::runner::detail
