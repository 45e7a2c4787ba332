// Transparent capture, the sandbox's side (see transparent.hpp).
#include "transparent.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "launch.hpp"
#include "namespaces.hpp"
#include "nft_batch.hpp"

namespace sluice::runner::detail {
namespace {

base::Error stepError(const char* step, int err) { return setupError(step, std::strerror(err)); }

std::expected<struct stat, int> statNetns(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return std::unexpected(errno);
  return st;
}

bool sameNamespace(int ns, const struct stat& other) {
  struct stat st {};
  return ::fstat(ns, &st) == 0 && st.st_ino == other.st_ino && st.st_dev == other.st_dev;
}

// One rtnetlink request: lo up (init brings it up too; whichever comes first) and the default
// routes "default dev lo" for IPv4 (with source 127.0.0.1, so a socket's local address is a
// real one) and IPv6: without a route, connect() to a non-loopback address fails with
// ENETUNREACH before the nat rule could see a packet. The three messages go in one datagram
// (the kernel handles them in order) and each is acknowledged.
class RouteRequest {
 public:
  void linkUp(int ifindex) {
    nlmsghdr* nh = add(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, sizeof(ifinfomsg), "bring lo up");
    auto* ifi = static_cast<ifinfomsg*>(NLMSG_DATA(nh));
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
  }
  void defaultRoute(unsigned char family, int oif) {
    nlmsghdr* nh =
        add(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, sizeof(rtmsg),
            family == AF_INET ? "IPv4 default route via lo" : "IPv6 default route via lo");
    auto* rt = static_cast<rtmsg*>(NLMSG_DATA(nh));
    rt->rtm_family = family;
    rt->rtm_table = RT_TABLE_MAIN;
    rt->rtm_protocol = RTPROT_BOOT;
    rt->rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
    rt->rtm_type = RTN_UNICAST;
    addAttr(nh, RTA_OIF, &oif, sizeof oif);
    if (family == AF_INET) {
      const in_addr src{htonl(INADDR_LOOPBACK)};
      addAttr(nh, RTA_PREFSRC, &src, sizeof src);
    }
  }
  // Sends every message, then reads one ack each; the first refusal is the error.
  base::Result<void> send(int nl) {
    const std::size_t len = used();
    if (::send(nl, buf_, len, 0) != static_cast<ssize_t>(len))
      return std::unexpected(stepError("send the routes", errno));
    unsigned acked = 0;
    alignas(nlmsghdr) char reply[1024];
    while (acked < count_) {
      const ssize_t n = ::recv(nl, reply, sizeof reply, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return std::unexpected(stepError("read the routes' acks", errno));
      int left = static_cast<int>(n);
      for (auto* r = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(r, left);
           r = NLMSG_NEXT(r, left)) {
        if (r->nlmsg_type != NLMSG_ERROR || r->nlmsg_seq == 0 || r->nlmsg_seq > count_) continue;
        if (r->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr)))
          return std::unexpected(stepError("read the routes' acks", EPROTO));
        const int err = static_cast<const nlmsgerr*>(NLMSG_DATA(r))->error;
        if (err != 0) return std::unexpected(stepError(steps_[r->nlmsg_seq - 1], -err));
        ++acked;
      }
    }
    return {};
  }

 private:
  std::size_t used() const { return last_ ? start_ + NLMSG_ALIGN(last_->nlmsg_len) : 0; }
  nlmsghdr* add(unsigned short type, unsigned short flags, std::size_t body, const char* step) {
    start_ = used();
    last_ = reinterpret_cast<nlmsghdr*>(buf_ + start_);
    last_->nlmsg_len = NLMSG_LENGTH(body);
    last_->nlmsg_type = type;
    last_->nlmsg_flags = flags;
    last_->nlmsg_seq = ++count_;
    steps_[count_ - 1] = step;
    return last_;
  }
  static void addAttr(nlmsghdr* nh, unsigned short type, const void* data, unsigned short len) {
    auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(nh) + NLMSG_ALIGN(nh->nlmsg_len));
    a->rta_type = type;
    a->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
    std::memcpy(RTA_DATA(a), data, len);
    nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + RTA_ALIGN(a->rta_len);
  }

  alignas(nlmsghdr) char buf_[256] = {};  // three messages: 32 + 52 + 44 bytes
  std::size_t start_ = 0;
  nlmsghdr* last_ = nullptr;
  unsigned count_ = 0;
  const char* steps_[3] = {};
};

base::Result<void> addRoutes() {
  Fd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!nl) return std::unexpected(stepError("route netlink socket", errno));
  const int lo = static_cast<int>(::if_nametoindex("lo"));
  if (lo == 0) return std::unexpected(stepError("find lo", errno));
  const int one = 1;  // acks without a copy of the request
  ::setsockopt(nl.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  RouteRequest req;
  req.linkUp(lo);
  req.defaultRoute(AF_INET, lo);
  req.defaultRoute(AF_INET6, lo);
  return req.send(nl.get());
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

// The blocked-attempt log: an nfnetlink_log socket bound to kBlockedLogGroup of this thread's
// namespace (the group the reject rules log to), copying kBlockedLogSnaplen bytes of each
// packet with a sequence number, sent as soon as logged (NFULA_SEQ: a gap is packets the kernel
// dropped because the socket's buffer was full). One config message, acknowledged; the instance
// lives as long as the socket.
base::Result<Fd> blockedLogSocket() {
  constexpr char kStep[] = "blocked-attempt log (nfnetlink_log)";
  auto fd = openNftSocket();
  if (!fd) return std::unexpected(stepError(kStep, fd.error().sys_errno));
  Fd nl(*fd);
  sockaddr_nl self{};
  self.nl_family = AF_NETLINK;
  if (::bind(nl.get(), reinterpret_cast<sockaddr*>(&self), sizeof self) != 0)
    return std::unexpected(stepError(kStep, errno));
  // Room for a burst (each message takes ~1 KiB of buffer): 4 MiB where sluice may exceed
  // rmem_max (CAP_NET_ADMIN), else as much as rmem_max allows. What overflows is dropped by
  // the kernel and shows as a gap in the sequence numbers (a "lost" row).
  const int rcvbuf = 4 << 20;
  if (::setsockopt(nl.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    ::setsockopt(nl.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);

  alignas(nlmsghdr) char buf[128] = {};
  auto* nh = reinterpret_cast<nlmsghdr*>(buf);
  nh->nlmsg_len = NLMSG_LENGTH(sizeof(nfgenmsg));
  nh->nlmsg_type = static_cast<std::uint16_t>(NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG);
  nh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nh->nlmsg_seq = 1;
  auto* g = static_cast<nfgenmsg*>(NLMSG_DATA(nh));
  g->nfgen_family = AF_UNSPEC;
  g->version = NFNETLINK_V0;
  g->res_id = htons(kBlockedLogGroup);
  auto attr = [&](std::uint16_t type, const void* data, std::uint16_t len) {
    auto* a = reinterpret_cast<nlattr*>(buf + NLMSG_ALIGN(nh->nlmsg_len));
    a->nla_type = type;
    a->nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + len);
    std::memcpy(reinterpret_cast<char*>(a) + NLA_HDRLEN, data, len);
    nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + NLA_ALIGN(a->nla_len);
  };
  const nfulnl_msg_config_cmd cmd{NFULNL_CFG_CMD_BIND};
  attr(NFULA_CFG_CMD, &cmd, sizeof cmd);
  nfulnl_msg_config_mode mode{};
  mode.copy_range = htonl(kBlockedLogSnaplen);
  mode.copy_mode = NFULNL_COPY_PACKET;
  attr(NFULA_CFG_MODE, &mode, sizeof mode);
  const std::uint16_t flags = htons(NFULNL_CFG_F_SEQ);
  attr(NFULA_CFG_FLAGS, &flags, sizeof flags);
  // Each packet at once (the default batches up to 100 for up to a second: a run that ends
  // sooner would leave its last attempts in the kernel's queue when sluice reads the socket).
  const std::uint32_t qthresh = htonl(1);
  attr(NFULA_CFG_QTHRESH, &qthresh, sizeof qthresh);
  if (::send(nl.get(), buf, nh->nlmsg_len, 0) != static_cast<ssize_t>(nh->nlmsg_len))
    return std::unexpected(stepError(kStep, errno));
  pollfd p{nl.get(), POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) return std::unexpected(stepError(kStep, ETIMEDOUT));
  alignas(nlmsghdr) char reply[512];
  const ssize_t n = ::recv(nl.get(), reply, sizeof reply, 0);
  if (n < 0) return std::unexpected(stepError(kStep, errno));
  const auto* r = reinterpret_cast<const nlmsghdr*>(reply);
  if (!NLMSG_OK(r, static_cast<int>(n)) || r->nlmsg_type != NLMSG_ERROR ||
      r->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr)))
    return std::unexpected(stepError(kStep, EPROTO));
  if (const int err = static_cast<const nlmsgerr*>(NLMSG_DATA(r))->error; err != 0)
    return std::unexpected(stepError(kStep, -err));
  return nl;
}

base::Result<void> makeSockets(bool dns, CaptureSockets& out) {
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
  auto log = blockedLogSocket();
  if (!log) return std::unexpected(log.error());
  out.blocked_log = std::move(*log);
  return {};
}

// On the capture thread: into the sandbox's namespace (this thread only), then every step.
CaptureResult setUp(int netns, bool dns) {
  const auto began = std::chrono::steady_clock::now();
  if (::setns(netns, CLONE_NEWNET) != 0)
    return std::unexpected(stepError("join the sandbox's network namespace", errno));
  if (auto r = addRoutes(); !r) return std::unexpected(r.error());
  if (auto r = installCaptureRules(); !r) return std::unexpected(r.error());
  CaptureSockets out;
  if (auto r = makeSockets(dns, out); !r) return std::unexpected(r.error());
  out.took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - began)
                    .count();
  return out;
}

std::future<CaptureResult> failed(base::Error e) {
  std::promise<CaptureResult> p;
  p.set_value(std::unexpected(std::move(e)));
  return p.get_future();
}

}  // namespace

// table inet sluice, as `nft list table inet sluice` shows it (docs/sandbox.md):
//
//   chain nat_output {
//     type nat hook output priority -100; policy accept;
//     meta nfproto ipv4 meta l4proto tcp ip daddr != 127.0.0.0/8 redirect to :3128
//     meta nfproto ipv6 meta l4proto tcp ip6 daddr != ::1 redirect to :3128
//   }
//   chain filter_output {
//     type filter hook output priority filter; policy accept;
//     ip daddr 127.0.0.0/8 accept
//     ip6 daddr ::1 accept
//     meta l4proto tcp log snaplen 128 group 1 reject with tcp reset
//     log snaplen 128 group 1 reject with icmpx admin-prohibited
//   }
//
// Output only: the nat chain runs first (priority -100), so the filter chain sees a redirected
// connection with its new, loopback destination. Loopback traffic stays as it is (the
// sandbox's own processes may talk among themselves, over UDP too: nothing on lo leaves the
// namespace). What still goes to a non-loopback address (UDP, QUIC, ICMP, any other protocol,
// and TCP the nat chain did not redirect) is rejected in the output path: the packet is
// dropped there, so the sending call fails at once (EPERM) instead of waiting for a timeout,
// and a QUIC client falls back to TCP, which is redirected. Each rejected packet is first
// logged to nfnetlink_log group kBlockedLogGroup (its first 128 bytes): sluice reads that
// group's socket (made with the DNS sockets) and writes one audit row per blocked attempt.
// Without a socket bound to the group the kernel drops the copy.
base::Result<void> installCaptureRules() {
  constexpr char kTable[] = "sluice";
  constexpr std::uint32_t kReg = NFT_REG_1;
  const char port[2] = {static_cast<char>(kProxyPort >> 8), static_cast<char>(kProxyPort & 0xff)};
  const std::string_view be_port(port, 2);
  const std::string_view tcp("\x06", 1);  // IPPROTO_TCP
  // Per family: where its destination address is in the network header and how many of its
  // bytes say loopback (127.0.0.0/8: the first byte; ::1: all 16).
  struct Family {
    const char* name;
    std::string_view nfproto;
    std::uint32_t daddr_offset;
    std::string_view loopback;
  };
  const Family families[] = {
      {"ipv4", std::string_view("\x02", 1), 16, std::string_view("\x7f", 1)},
      {"ipv6", std::string_view("\x0a", 1), 24,
       std::string_view("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16)},
  };
  // The family's match, TCP's when asked, then the destination compared (op) with loopback.
  auto toLoopback = [&](std::string description, const Family& f, bool tcp_only, std::uint32_t op) {
    NftRule rule(std::move(description));
    rule.meta(NFT_META_NFPROTO, kReg).cmp(NFT_CMP_EQ, kReg, f.nfproto);
    if (tcp_only) rule.meta(NFT_META_L4PROTO, kReg).cmp(NFT_CMP_EQ, kReg, tcp);
    rule.payload(NFT_PAYLOAD_NETWORK_HEADER, f.daddr_offset, f.loopback.size(), kReg)
        .cmp(op, kReg, f.loopback);
    return rule;
  };

  NftBatch b;
  b.addTable(NFPROTO_INET, kTable);
  b.addBaseChain(NFPROTO_INET, kTable, "nat_output", "nat", NF_INET_LOCAL_OUT, -100, NF_ACCEPT);
  b.addBaseChain(NFPROTO_INET, kTable, "filter_output", "filter", NF_INET_LOCAL_OUT, 0, NF_ACCEPT);
  for (const Family& f : families)
    b.addRule(
        NFPROTO_INET, kTable, "nat_output",
        toLoopback(std::string(f.name) + " tcp to non-loopback: redirect", f, true, NFT_CMP_NEQ)
            .immediate(kReg, be_port)
            .redirect(kReg, NF_NAT_RANGE_PROTO_SPECIFIED));
  for (const Family& f : families)
    b.addRule(NFPROTO_INET, kTable, "filter_output",
              toLoopback(std::string(f.name) + " to loopback: accept", f, false, NFT_CMP_EQ)
                  .verdict(NF_ACCEPT));
  b.addRule(NFPROTO_INET, kTable, "filter_output",
            NftRule("other tcp: reject with tcp reset")
                .meta(NFT_META_L4PROTO, kReg)
                .cmp(NFT_CMP_EQ, kReg, tcp)
                .log(kBlockedLogGroup, kBlockedLogSnaplen)
                .reject(NFT_REJECT_TCP_RST, 0));
  b.addRule(NFPROTO_INET, kTable, "filter_output",
            NftRule("everything else: reject with icmpx admin-prohibited")
                .log(kBlockedLogGroup, kBlockedLogSnaplen)
                .reject(NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_ADMIN_PROHIBITED));

  auto fd = openNftSocket();
  if (!fd) return std::unexpected(setupError("nftables rules", fd.error().message));
  Fd nl(*fd);
  if (auto r = b.commit(nl.get()); !r)
    return std::unexpected(setupError("nftables rules", r.error().message));
  return {};
}

std::future<CaptureResult> startCapture(pid_t init, bool dns) {
  const std::string path = "/proc/" + std::to_string(init) + "/ns/net";
  Fd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return failed(stepError("open the sandbox's network namespace", errno));
  return startCaptureIn(std::move(ns), dns);
}

std::future<CaptureResult> startCaptureIn(Fd netns, bool dns) {
  auto ours = statNetns("/proc/thread-self/ns/net");
  if (!ours) return failed(stepError("read sluice's network namespace", ours.error()));
  if (sameNamespace(netns.get(), *ours))
    return failed(setupError("open the sandbox's network namespace",
                             "it is sluice's own, not the sandbox's"));
  // The thread ends after the set-up, and with it the only task that joined the namespace.
  return std::async(
      std::launch::async, [](Fd fd, bool with_dns) { return setUp(fd.get(), with_dns); },
      std::move(netns), dns);
}

}  // namespace sluice::runner::detail
