// Transparent capture, the sandbox's side (runner/src/transparent.cpp): with network_proxy,
// TCP to any address reaches the handed listeners with its original destination, UDP and ICMP
// to anything outside fail at once, DNS to 127.0.0.53 reaches the handed sockets, the sandbox's
// resolv.conf names it, and nothing of it changes the host's routes or rules. Programs run in
// the sandbox (python3); the rules are also read from inside the sandbox's namespace, which the
// test reaches through a handed socket (SIOCGSKNS).
#include "transparent.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "isolation.hpp"
#include "nft_batch.hpp"
#include "proc_scan.hpp"
#include "sluice/runner/sandbox.hpp"
#include "sluice/runner/session.hpp"

using namespace sluice::runner;
using namespace std::chrono_literals;

namespace {

constexpr int kSoOriginalDst = 80;  // SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST alike

RunSpec python(const std::string& script) {
  RunSpec s;
  s.argv = {"python3", "-c", script};
  s.execution_id = uniqueId("tc");
  s.limits.timeout = 30s;
  s.limits.cpu_time = 20s;
  s.network_proxy = true;
  return s;
}

// "192.0.2.1:80" / "[2001:db8::1]:443": where an accepted, redirected connection was going.
std::string originalDestination(int c) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::getsockname(c, reinterpret_cast<sockaddr*>(&local), &len) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (local.ss_family == AF_INET) {
    sockaddr_in o{};
    len = sizeof o;
    if (::getsockopt(c, SOL_IP, kSoOriginalDst, &o, &len) != 0) return std::strerror(errno);
    ::inet_ntop(AF_INET, &o.sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(o.sin_port));
  }
  sockaddr_in6 o{};
  len = sizeof o;
  if (::getsockopt(c, SOL_IPV6, kSoOriginalDst, &o, &len) != 0) return std::strerror(errno);
  ::inet_ntop(AF_INET6, &o.sin6_addr, text, sizeof text);
  return "[" + std::string(text) + "]:" + std::to_string(ntohs(o.sin6_port));
}

// Stands in for the proxy: every handed listener answers each connection with its original
// destination. Also keeps the sandbox's network namespace (from the first listener) for
// inspection after the run.
struct FakeProxy {
  std::mutex mu;
  std::vector<std::thread> threads;
  std::vector<std::string> seen;  // original destinations, in accept order
  std::vector<int> families;      // of the handed listeners, in call order
  int netns = -1;
  std::atomic<bool> stop{false};

  ListenerCallback callback() {
    return [this](int fd) -> std::expected<void, std::string> {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      std::lock_guard lock(mu);
      families.push_back(ss.ss_family);
      if (netns < 0) netns = ::ioctl(fd, SIOCGSKNS);
      threads.emplace_back([this, fd] { serve(fd); });
      return {};
    };
  }
  void serve(int fd) {
    while (!stop) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      const int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      const std::string dst = originalDestination(c);
      {
        std::lock_guard lock(mu);
        seen.push_back(dst);
      }
      const std::string line = "ORIG " + dst + "\n";
      (void)!::write(c, line.data(), line.size());
      ::close(c);
    }
    ::close(fd);
  }
  ~FakeProxy() {
    stop = true;
    for (auto& t : threads) t.join();
    if (netns >= 0) ::close(netns);
  }
};

// Answers every query: one A record 198.18.0.7 for type A, no records for any other type.
std::string dnsAnswer(const std::string& q) {
  if (q.size() < 12) return {};
  std::size_t p = 12;
  while (p < q.size() && q[p] != 0) p += 1 + static_cast<unsigned char>(q[p]);
  p += 5;  // the root label, type, class
  if (p > q.size()) return {};
  std::string r = q.substr(0, p);
  const bool type_a = q[p - 4] == 0 && q[p - 3] == 1;
  r[2] = static_cast<char>(0x80 | (q[2] & 0x01));  // QR, RD copied
  r[3] = static_cast<char>(0x80);                  // RA, NOERROR
  r[6] = 0;
  r[7] = type_a ? 1 : 0;
  r[8] = r[9] = r[10] = r[11] = 0;
  if (type_a)
    r += std::string("\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc6\x12\x00\x07", 16);
  return r;
}

// Stands in for sluice's DNS server on the handed sockets.
struct FakeDns {
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<int> udp_queries{0}, tcp_queries{0};
  int calls = 0;
  int blocked = -1;  // the blocked-attempt log (nfnetlink_log) socket handed over

  DnsCallback callback() {
    return [this](int udp, int tcp, int blocked_log) -> std::expected<void, std::string> {
      ++calls;
      blocked = blocked_log;  // read by the test, closed with the FakeDns
      thread = std::thread([this, udp, tcp] { serve(udp, tcp); });
      return {};
    };
  }
  void serveTcp(int c) {
    timeval tv{2, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
      unsigned char len[2];
      if (::recv(c, len, 2, MSG_WAITALL) != 2) break;
      std::string q(static_cast<std::size_t>(len[0] << 8 | len[1]), '\0');
      if (::recv(c, q.data(), q.size(), MSG_WAITALL) != static_cast<ssize_t>(q.size())) break;
      ++tcp_queries;
      const std::string a = dnsAnswer(q);
      const std::string framed =
          std::string{static_cast<char>(a.size() >> 8), static_cast<char>(a.size() & 0xff)} + a;
      (void)!::write(c, framed.data(), framed.size());
    }
    ::close(c);
  }
  void serve(int udp, int tcp) {
    while (!stop) {
      pollfd p[2] = {{udp, POLLIN, 0}, {tcp, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      if (p[0].revents & POLLIN) {
        char buf[1500];
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        const ssize_t n =
            ::recvfrom(udp, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n > 0) {
          ++udp_queries;
          const std::string a = dnsAnswer(std::string(buf, static_cast<std::size_t>(n)));
          ::sendto(udp, a.data(), a.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
      }
      if (p[1].revents & POLLIN) {
        const int c = ::accept(tcp, nullptr, nullptr);
        if (c >= 0) serveTcp(c);
      }
    }
    ::close(udp);
    ::close(tcp);
  }
  ~FakeDns() {
    stop = true;
    if (thread.joinable()) thread.join();
    if (blocked >= 0) ::close(blocked);
  }
};

std::string runCommand(const std::string& cmd) { return sluice::testing::shellOutput(cmd).second; }

// Runs `fn` on a thread of its own inside the network namespace `netns` (only that thread
// joins it; processes it starts inherit it).
template <typename Fn>
void inNamespace(int netns, Fn fn) {
  std::thread t([&] {
    ASSERT_EQ(::setns(netns, CLONE_NEWNET), 0) << std::strerror(errno);
    fn();
  });
  t.join();
}

// What a root process inside the namespace gets for one ICMP echo to `addr`: "EPERM" etc.
std::string icmpEchoError(int family, const char* addr) {
  const int proto = family == AF_INET ? static_cast<int>(IPPROTO_ICMP) : IPPROTO_ICMPV6;
  const int s = ::socket(family, SOCK_RAW | SOCK_CLOEXEC, proto);
  if (s < 0) return std::string("socket: ") + std::strerror(errno);
  unsigned char echo[8] = {static_cast<unsigned char>(family == AF_INET ? 8 : 128), 0, 0xf7, 0xff};
  sockaddr_storage to{};
  socklen_t len;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&to);
    a->sin_family = AF_INET;
    ::inet_pton(AF_INET, addr, &a->sin_addr);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&to);
    a->sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, addr, &a->sin6_addr);
    len = sizeof *a;
  }
  const ssize_t n = ::sendto(s, echo, sizeof echo, 0, reinterpret_cast<sockaddr*>(&to), len);
  const int err = errno;
  ::close(s);
  return n < 0 ? std::strerror(err) : "sent";
}

const char kConnectScript[] = R"PY(
import socket
for addr in (("192.0.2.1", 80), ("2001:db8::1", 443)):
    s = socket.create_connection(addr, timeout=10)
    print(s.makefile().readline().strip())
)PY";

// Each attempt: "<label> <errno name> fast|slow", or "<label> SENT" if nothing refused it.
const char kRefusedScript[] = R"PY(
import errno, socket, time
def attempt(label, fn):
    t = time.monotonic()
    try:
        fn()
        print(label, "SENT")
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, e.errno), "fast" if time.monotonic() - t < 1 else "slow")
def connected_udp(family, addr):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.connect(addr)
    s.send(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01")
    s.recv(512)
def sendto_udp(family, addr):
    socket.socket(family, socket.SOCK_DGRAM).sendto(b"x", addr)
def ping(family, proto, addr):
    s = socket.socket(family, socket.SOCK_DGRAM, proto)
    s.settimeout(3)
    s.sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01", addr)
    s.recv(64)
attempt("udp4-connected", lambda: connected_udp(socket.AF_INET, ("192.0.2.53", 53)))
attempt("udp4-sendto", lambda: sendto_udp(socket.AF_INET, ("192.0.2.53", 53)))
attempt("quic4", lambda: connected_udp(socket.AF_INET, ("192.0.2.1", 443)))
attempt("udp6-connected", lambda: connected_udp(socket.AF_INET6, ("2001:db8::53", 53)))
attempt("ping4", lambda: ping(socket.AF_INET, socket.IPPROTO_ICMP, ("192.0.2.1", 0)))
attempt("ping6", lambda: ping(socket.AF_INET6, socket.IPPROTO_ICMPV6, ("2001:db8::1", 0)))
attempt("dns-unserved", lambda: connected_udp(socket.AF_INET, ("127.0.0.53", 53)))
)PY";

const char kDnsScript[] = R"PY(
import socket, struct, subprocess
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x04test\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.connect(("127.0.0.53", 53))
u.send(q)
r = u.recv(512)
print("udp", r[:2].hex(), socket.inet_ntoa(r[-4:]))
t = socket.create_connection(("127.0.0.53", 53), timeout=5)
t.sendall(struct.pack("!H", len(q)) + q)
n = struct.unpack("!H", t.recv(2, socket.MSG_WAITALL))[0]
r = t.recv(n, socket.MSG_WAITALL)
print("tcp", r[:2].hex(), socket.inet_ntoa(r[-4:]))
t.close()  # the fake server answers one TCP client at a time
print(subprocess.run(["getent", "ahostsv4", "example.test"], capture_output=True, text=True).stdout.split("\n")[0])
print(open("/etc/resolv.conf").read(), end="")
)PY";

TEST(TransparentCapture, TcpToAnyAddressReachesTheListenersWithItsOriginalDestination) {
  REQUIRE_SANDBOX();
  FakeProxy proxy;
  auto r = runSandboxed(python(kConnectScript), RunHooks{.on_listener = proxy.callback()});
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->out.text, "ORIG 192.0.2.1:80\nORIG [2001:db8::1]:443\n") << r->err.text;
  std::lock_guard lock(proxy.mu);
  EXPECT_EQ(proxy.families, (std::vector<int>{AF_INET, AF_INET6}));
  EXPECT_EQ(proxy.seen, (std::vector<std::string>{"192.0.2.1:80", "[2001:db8::1]:443"}));
}

TEST(TransparentCapture, UdpIcmpAndQuicToAnythingOutsideFailAtOnce) {
  REQUIRE_SANDBOX();
  FakeProxy proxy;
  auto r = runSandboxed(python(kRefusedScript), RunHooks{.on_listener = proxy.callback()});
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  const std::string& out = r->out.text;
  EXPECT_EQ(out.find("SENT"), std::string::npos) << out;
  EXPECT_EQ(out.find("slow"), std::string::npos) << out;
  // Dropped on the way out by the reject rules: the send itself fails.
  for (const char* l :
       {"udp4-connected EPERM", "udp4-sendto EPERM", "quic4 EPERM", "udp6-connected EPERM"})
    EXPECT_NE(out.find(l), std::string::npos) << l << "\n" << out;
  // Without an on_dns hook nothing listens on 127.0.0.53: refused at once.
  EXPECT_NE(out.find("dns-unserved ECONNREFUSED fast"), std::string::npos) << out;
  EXPECT_NE(out.find("ping4 "), std::string::npos) << out;  // refused (EACCES: no ping group)
  EXPECT_NE(out.find("ping6 "), std::string::npos) << out;
  std::lock_guard lock(proxy.mu);
  EXPECT_TRUE(proxy.seen.empty());
  // From inside the namespace, as root (raw sockets): ICMP is rejected too; routes and rules
  // are what docs/sandbox.md says.
  ASSERT_GE(proxy.netns, 0) << "SIOCGSKNS: " << std::strerror(errno);
  inNamespace(proxy.netns, [&] {
    EXPECT_EQ(icmpEchoError(AF_INET, "192.0.2.1"), std::strerror(EPERM));
    EXPECT_EQ(icmpEchoError(AF_INET6, "2001:db8::1"), std::strerror(EPERM));
    const std::string routes = runCommand("ip route; ip -6 route");
    EXPECT_NE(routes.find("default dev lo scope link src 127.0.0.1"), std::string::npos) << routes;
    EXPECT_NE(routes.find("default dev lo metric"), std::string::npos) << routes;
    const std::string rules = runCommand("nft list table inet sluice");
    EXPECT_NE(rules.find("redirect to :3128"), std::string::npos) << rules;
    EXPECT_NE(rules.find("reject with icmpx admin-prohibited"), std::string::npos) << rules;
  });
}

// Every packet the reject rules drop, as the blocked-attempt log socket (handed over with the
// DNS sockets) received it: "<IP protocol> <destination>" in order, and the sequence numbers.
std::vector<std::string> blockedLogPackets(int fd, std::vector<std::uint32_t>& seqs) {
  std::vector<std::string> out;
  alignas(nlmsghdr) char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type != (NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET)) continue;
      const int attrs_at = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(nfgenmsg)));
      int rest = static_cast<int>(h->nlmsg_len) - attrs_at;
      for (auto* a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(h) + attrs_at);
           rest >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= rest;
           rest -= NLA_ALIGN(a->nla_len), a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(a) +
                                                                        NLA_ALIGN(a->nla_len))) {
        const auto* v = reinterpret_cast<const unsigned char*>(a) + NLA_HDRLEN;
        const int len = a->nla_len - NLA_HDRLEN;
        if ((a->nla_type & NLA_TYPE_MASK) == NFULA_SEQ && len == 4) {
          std::uint32_t be;
          std::memcpy(&be, v, 4);
          seqs.push_back(ntohl(be));
        }
        if ((a->nla_type & NLA_TYPE_MASK) != NFULA_PAYLOAD || len < 1) continue;
        char addr[INET6_ADDRSTRLEN] = {};
        if (v[0] >> 4 == 4 && len >= 20) {
          ::inet_ntop(AF_INET, v + 16, addr, sizeof addr);
          out.push_back(std::to_string(v[9]) + " " + addr);
        } else if (v[0] >> 4 == 6 && len >= 40) {
          ::inet_ntop(AF_INET6, v + 24, addr, sizeof addr);
          out.push_back(std::to_string(v[6]) + " " + addr);
        } else {
          out.push_back("undecodable");
        }
      }
    }
  }
  return out;
}

TEST(TransparentCapture, EveryRejectedPacketIsCopiedToTheBlockedLogSocket) {
  REQUIRE_SANDBOX();
  FakeProxy proxy;
  FakeDns dns;
  auto r = runSandboxed(python(kRefusedScript),
                        RunHooks{.on_listener = proxy.callback(), .on_dns = dns.callback()});
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  dns.stop = true;
  if (dns.thread.joinable()) dns.thread.join();
  ASSERT_GE(dns.blocked, 0);
  const std::string& out = r->out.text;
  EXPECT_NE(out.find("udp4-sendto EPERM"), std::string::npos) << out;
  // ICMP from inside the namespace as root (the sandbox's program may not open ICMP sockets).
  ASSERT_GE(proxy.netns, 0) << "SIOCGSKNS: " << std::strerror(errno);
  inNamespace(proxy.netns, [&] {
    EXPECT_EQ(icmpEchoError(AF_INET, "192.0.2.1"), std::strerror(EPERM));
    EXPECT_EQ(icmpEchoError(AF_INET6, "2001:db8::1"), std::strerror(EPERM));
  });
  std::vector<std::uint32_t> seqs;
  const auto packets = blockedLogPackets(dns.blocked, seqs);
  // UDP (17) to 192.0.2.53 twice (connected, sendto), QUIC-like UDP to 192.0.2.1:443, UDP over
  // IPv6, then ICMP (1) and ICMPv6 (58); the DNS query to 127.0.0.53 is not among them.
  EXPECT_EQ(packets, (std::vector<std::string>{"17 192.0.2.53", "17 192.0.2.53", "17 192.0.2.1",
                                               "17 2001:db8::53", "1 192.0.2.1", "58 2001:db8::1"}))
      << out;
  ASSERT_EQ(seqs.size(), packets.size());
  for (std::size_t i = 1; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
}

TEST(TransparentCapture, DnsReachesTheHandedSocketsAndResolvConfNamesThem) {
  REQUIRE_SANDBOX();
  FakeProxy proxy;
  FakeDns dns;
  auto r = runSandboxed(python(kDnsScript),
                        RunHooks{.on_listener = proxy.callback(), .on_dns = dns.callback()});
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(dns.calls, 1);
  EXPECT_EQ(r->out.text,
            "udp 1234 198.18.0.7\ntcp 1234 198.18.0.7\n198.18.0.7      STREAM example.test\n"
            "nameserver 127.0.0.53\noptions edns0 timeout:1 attempts:1\n")
      << r->err.text;
  EXPECT_GE(dns.udp_queries.load(), 2);  // the script's, then getent's
  EXPECT_EQ(dns.tcp_queries.load(), 1);
}

TEST(TransparentCapture, NoDnsSocketsWithoutTheHookAndNoNetworkNoCapture) {
  REQUIRE_SANDBOX();
  RunSpec s = python(
      "import socket\n"
      "print(open('/etc/resolv.conf').readline().strip())\n"
      "try:\n  socket.create_connection(('192.0.2.1', 80), timeout=3); print('CONNECTED')\n"
      "except OSError as e: print('refused', e.errno)\n");
  s.network_proxy = false;
  auto r = runSandboxed(s);
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  // No network: no route either, so connect() fails at once (ENETUNREACH).
  EXPECT_EQ(r->out.text, "nameserver 127.0.0.1\nrefused " + std::to_string(ENETUNREACH) + "\n");
}

TEST(TransparentCapture, TheHostsRoutesAndRulesStayAsTheyWere) {
  REQUIRE_SANDBOX();
  const std::string cmd =
      "command -v nft >/dev/null || echo NO-NFT; ip route; ip -6 route; "
      "nft list ruleset";
  const std::string before = runCommand(cmd);
  ASSERT_EQ(before.find("NO-NFT"), std::string::npos) << "the test needs nft (nftables)";
  FakeProxy proxy;
  FakeDns dns;
  auto r = runSandboxed(python(kConnectScript),
                        RunHooks{.on_listener = proxy.callback(), .on_dns = dns.callback()});
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(runCommand(cmd), before);
  EXPECT_EQ(runCommand("nft list tables").find("sluice"), std::string::npos);
}

TEST(TransparentCapture, SessionsCaptureToo) {
  REQUIRE_SANDBOX();
  SessionSpec spec;
  spec.session_id = uniqueId("tcs");
  spec.network_proxy = true;
  FakeProxy proxy;
  FakeDns dns;
  auto session = SandboxSession::start(spec, proxy.callback(), dns.callback());
  ASSERT_TRUE(session) << session.error().where << ": " << session.error().message;
  ExecSpec e;
  e.argv = {"python3", "-c", kConnectScript};
  auto r = (*session)->exec(e);
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->out.text, "ORIG 192.0.2.1:80\nORIG [2001:db8::1]:443\n") << r->err.text;
  e.argv = {"python3", "-c", kDnsScript};
  r = (*session)->exec(e);
  ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
  EXPECT_EQ(r->out.text.rfind("udp 1234 198.18.0.7\ntcp 1234 198.18.0.7\n", 0), 0u)
      << r->out.text << r->err.text;
  (*session)->end();
  EXPECT_EQ(dns.calls, 1);
}

// The capture rules as the kernel holds them, read back with `nft -j` from a namespace the test
// makes (the run-time path never starts nft): every rule's matches and action.
struct TestNamespace {
  // Runs `fn` on a thread that has a new, empty network namespace of its own.
  template <typename Fn>
  static void run(Fn fn) {
    std::thread t([&] {
      ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << std::strerror(errno);
      fn();
    });
    t.join();
  }
};

std::string compactRule(const nlohmann::json& rule) {
  std::string out = rule.at("chain").get<std::string>() + ":";
  for (const auto& e : rule.at("expr")) out += " " + e.dump();
  return out;
}

TEST(CaptureRules, InstalledAsOneBatchAndReadBackExactly) {
  REQUIRE_SANDBOX();
  TestNamespace::run([] {
    auto r = detail::installCaptureRules();
    ASSERT_TRUE(r) << r.error().where << ": " << r.error().message;
    const std::string text = runCommand("nft -j list ruleset");
    const auto j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    std::vector<std::string> tables, chains, rules;
    for (const auto& o : j.at("nftables")) {
      if (o.contains("table"))
        tables.push_back(o["table"]["family"].get<std::string>() + " " +
                         o["table"]["name"].get<std::string>());
      if (o.contains("chain")) {
        const auto& c = o["chain"];
        chains.push_back(c["table"].get<std::string>() + "/" + c["name"].get<std::string>() + " " +
                         c["type"].get<std::string>() + " " + c["hook"].get<std::string>() + " " +
                         std::to_string(c["prio"].get<int>()) + " " +
                         c["policy"].get<std::string>());
      }
      if (o.contains("rule")) rules.push_back(compactRule(o["rule"]));
    }
    EXPECT_EQ(tables, (std::vector<std::string>{"inet sluice"}));
    EXPECT_EQ(chains, (std::vector<std::string>{"sluice/nat_output nat output -100 accept",
                                                "sluice/filter_output filter output 0 accept"}));
    const std::string tcp =
        R"({"match":{"left":{"meta":{"key":"l4proto"}},"op":"==","right":"tcp"}})";
    const std::string redirect = R"({"redirect":{"port":3128}})";
    const std::string daddr4 = R"({"payload":{"field":"daddr","protocol":"ip"}})";
    const std::string daddr6 = R"({"payload":{"field":"daddr","protocol":"ip6"}})";
    const std::string net8 = R"({"prefix":{"addr":"127.0.0.0","len":8}})";
    // Every rejected packet is first copied to nfnetlink_log group 1 (the blocked-attempt log).
    const std::string log = R"({"log":{"group":1,"snaplen":128}})";
    EXPECT_EQ(
        rules,
        (std::vector<std::string>{
            "nat_output: " + tcp + R"( {"match":{"left":)" + daddr4 + R"(,"op":"!=","right":)" +
                net8 + "}} " + redirect,
            "nat_output: " + tcp + R"( {"match":{"left":)" + daddr6 +
                R"(,"op":"!=","right":"::1"}} )" + redirect,
            R"(filter_output: {"match":{"left":)" + daddr4 + R"(,"op":"==","right":)" + net8 +
                R"(}} {"accept":null})",
            R"(filter_output: {"match":{"left":)" + daddr6 +
                R"(,"op":"==","right":"::1"}} {"accept":null})",
            "filter_output: " + tcp + " " + log + R"( {"reject":{"type":"tcp reset"}})",
            "filter_output: " + log + R"( {"reject":{"expr":"admin-prohibited","type":"icmpx"}})",
        }))
        << text;
    // nft leaves out the family matches a payload implies; the kernel's expressions show them
    // (an IPv6 packet's byte 16 must not be read as an IPv4 destination).
    const std::string exprs = runCommand("nft --debug=netlink list table inet sluice");
    const std::string load = "[ meta load nfproto => reg 1 ]\n  [ cmp eq reg 1 ";
    std::vector<std::string> nfproto;
    for (auto at = exprs.find(load); at != std::string::npos; at = exprs.find(load, at + 1))
      nfproto.push_back(exprs.substr(at + load.size(), 10));
    EXPECT_EQ(nfproto,
              (std::vector<std::string>{"0x00000002", "0x0000000a", "0x00000002", "0x0000000a"}))
        << exprs;
  });
}

TEST(CaptureRules, NeverInstalledInSluicesOwnNamespace) {
  REQUIRE_SANDBOX();
  // Asked to capture in a "sandbox" whose namespace is the host's (a pid of this process, or a
  // namespace a helper that never left the host's would send), the set-up refuses before
  // touching anything.
  const std::string before = runCommand("ip route; ip -6 route; nft list ruleset");
  auto own = detail::startCapture(::getpid(), true).get();
  ASSERT_FALSE(own);
  EXPECT_EQ(own.error().where, "open the sandbox's network namespace");
  EXPECT_NE(own.error().message.find("sluice's own"), std::string::npos) << own.error().message;
  detail::Fd host_ns(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(host_ns);
  auto sent = detail::startCaptureIn(std::move(host_ns), true).get();
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().where, "open the sandbox's network namespace");
  EXPECT_NE(sent.error().message.find("sluice's own"), std::string::npos) << sent.error().message;
  EXPECT_EQ(runCommand("ip route; ip -6 route; nft list ruleset"), before);
}

TEST(CaptureRules, ASecondInstallIsRefusedNamingTheTableAndChangesNothing) {
  REQUIRE_SANDBOX();
  TestNamespace::run([] {
    ASSERT_TRUE(detail::installCaptureRules());
    const std::string before = runCommand("nft list ruleset");
    auto again = detail::installCaptureRules();
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().where, "nftables rules");
    EXPECT_EQ(again.error().message, "table inet sluice: " + std::string(std::strerror(EEXIST)) +
                                         " (errno " + std::to_string(EEXIST) + ")");
    EXPECT_EQ(runCommand("nft list ruleset"), before);
  });
}

TEST(CaptureRules, AFailedBatchNamesTheRefusedRuleAndLeavesNothingBehind) {
  REQUIRE_SANDBOX();
  TestNamespace::run([] {
    detail::NftBatch b;
    b.addTable(NFPROTO_INET, "t");
    b.addBaseChain(NFPROTO_INET, "t", "c", "filter", NF_INET_LOCAL_OUT, 0, NF_ACCEPT);
    b.addRule(NFPROTO_INET, "t", "c", detail::NftRule("fine").verdict(NF_ACCEPT));
    // An expression the kernel does not know: the batch fails at the second rule.
    b.addRule(NFPROTO_INET, "t", "c", detail::NftRule("bogus").raw("no-such-expression", ""));
    auto fd = detail::openNftSocket();
    ASSERT_TRUE(fd) << fd.error().message;
    auto r = b.commit(*fd);
    ::close(*fd);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().where, "rule 2 in chain c (bogus)");
    EXPECT_EQ(r.error().sys_errno, ENOENT) << r.error().message;
    // All or nothing: not even the table stayed.
    EXPECT_EQ(runCommand("nft list ruleset"), "");
  });
}

}  // namespace
