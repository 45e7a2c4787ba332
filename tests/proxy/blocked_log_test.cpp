// The blocked-attempt log's decoder (proxy/src/blocked_log.hpp): packets and nfnetlink_log
// datagrams built byte by byte, the sequence-gap count, the row budget, and random or mutated
// bytes that must never crash it or read outside the buffer.
#include "blocked_log.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "isolation.hpp"
#include "proxy_fixture.hpp"

namespace sluice::proxy::blocked {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes ipv4(std::uint8_t proto, std::array<std::uint8_t, 4> dst, Bytes transport,
           std::size_t option_words = 0, std::uint16_t frag = 0) {
  Bytes p(20 + option_words * 4, 0);
  p[0] = static_cast<std::uint8_t>(0x40 | (5 + option_words));
  p[6] = static_cast<std::uint8_t>(frag >> 8);
  p[7] = static_cast<std::uint8_t>(frag);
  p[8] = 64;
  p[9] = proto;
  p[12] = 127, p[15] = 1;
  std::memcpy(p.data() + 16, dst.data(), 4);
  p.insert(p.end(), transport.begin(), transport.end());
  return p;
}

Bytes ipv6(std::uint8_t next, const char* dst, Bytes rest) {
  Bytes p(40, 0);
  p[0] = 0x60;
  p[6] = next;
  p[7] = 64;
  p[39 - 16] = 1;  // source ::1
  ::inet_pton(AF_INET6, dst, p.data() + 24);
  p.insert(p.end(), rest.begin(), rest.end());
  return p;
}

Bytes ports(std::uint16_t src, std::uint16_t dst, std::size_t header = 8) {
  Bytes t(header, 0);
  t[0] = static_cast<std::uint8_t>(src >> 8), t[1] = static_cast<std::uint8_t>(src);
  t[2] = static_cast<std::uint8_t>(dst >> 8), t[3] = static_cast<std::uint8_t>(dst);
  return t;
}

void attr(Bytes& b, std::uint16_t type, const Bytes& value) {
  nlattr a{static_cast<std::uint16_t>(NLA_HDRLEN + value.size()), type};
  const auto* p = reinterpret_cast<const std::uint8_t*>(&a);
  b.insert(b.end(), p, p + sizeof a);
  b.insert(b.end(), value.begin(), value.end());
  b.resize(b.size() + (NLA_ALIGN(value.size()) - value.size()), 0);
}

// One NFULNL_MSG_PACKET message as the kernel sends it: header, family, packet header
// attribute, payload, sequence number.
Bytes nflogMessage(const Bytes& payload, std::optional<std::uint32_t> seq,
                   std::uint16_t type = NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET) {
  Bytes body;
  nfgenmsg g{AF_INET, NFNETLINK_V0, htons(1)};
  const auto* gp = reinterpret_cast<const std::uint8_t*>(&g);
  body.insert(body.end(), gp, gp + sizeof g);
  attr(body, NFULA_PACKET_HDR, Bytes{0x08, 0x00, 3, 0});
  attr(body, NFULA_PAYLOAD, payload);
  if (seq) {
    const std::uint32_t be = htonl(*seq);
    const auto* sp = reinterpret_cast<const std::uint8_t*>(&be);
    attr(body, NFULA_SEQ, Bytes(sp, sp + 4));
  }
  nlmsghdr h{};
  h.nlmsg_len = static_cast<std::uint32_t>(NLMSG_HDRLEN + body.size());
  h.nlmsg_type = type;
  Bytes m(reinterpret_cast<const std::uint8_t*>(&h),
          reinterpret_cast<const std::uint8_t*>(&h) + sizeof h);
  m.insert(m.end(), body.begin(), body.end());
  m.resize(NLMSG_ALIGN(m.size()), 0);
  return m;
}

TEST(BlockedLogDecodeTest, Ipv4UdpGivesDestinationAddressAndPort) {
  auto a = decodePacket(ipv4(IPPROTO_UDP, {192, 0, 2, 53}, ports(40000, 53)));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->protocol, "UDP");
  EXPECT_EQ(a->address, "192.0.2.53");
  EXPECT_EQ(a->port, 53);
  EXPECT_EQ(describe(*a), "UDP to 192.0.2.53:53");
}

TEST(BlockedLogDecodeTest, Ipv4OptionsAreSkippedToTheTransportHeader) {
  auto a = decodePacket(ipv4(IPPROTO_TCP, {198, 51, 100, 7}, ports(1234, 443, 20), 3));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->protocol, "TCP");
  EXPECT_EQ(a->port, 443);
}

TEST(BlockedLogDecodeTest, IcmpAndOtherProtocolsHaveNoPort) {
  auto icmp = decodePacket(ipv4(IPPROTO_ICMP, {192, 0, 2, 1}, Bytes{8, 0, 0, 0, 0, 1, 0, 1}));
  ASSERT_TRUE(icmp);
  EXPECT_EQ(icmp->protocol, "ICMP");
  EXPECT_EQ(icmp->port, 0);
  EXPECT_EQ(describe(*icmp), "ICMP to 192.0.2.1");
  auto gre = decodePacket(ipv4(47, {192, 0, 2, 1}, Bytes(8, 0xff)));
  ASSERT_TRUE(gre);
  EXPECT_EQ(gre->protocol, "IP protocol 47");
  EXPECT_EQ(gre->port, 0);
}

TEST(BlockedLogDecodeTest, LaterFragmentsAndCutTransportHeadersLeaveThePortZero) {
  auto frag = decodePacket(ipv4(IPPROTO_UDP, {192, 0, 2, 53}, ports(1, 53), 0, 0x0010));
  ASSERT_TRUE(frag);
  EXPECT_EQ(frag->port, 0);
  auto cut = decodePacket(ipv4(IPPROTO_UDP, {192, 0, 2, 53}, Bytes{0x9c, 0x40, 0x00}));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->address, "192.0.2.53");
  EXPECT_EQ(cut->port, 0);
}

TEST(BlockedLogDecodeTest, Ipv6WithExtensionHeaders) {
  auto plain = decodePacket(ipv6(IPPROTO_UDP, "2001:db8::1", ports(5000, 443)));
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->address, "2001:db8::1");
  EXPECT_EQ(plain->port, 443);
  EXPECT_EQ(describe(*plain), "UDP to [2001:db8::1]:443");
  // hop-by-hop (8 bytes) -> fragment (8 bytes, first fragment) -> UDP
  Bytes ext{44, 0, 1, 4, 0, 0, 0, 0};                // hop-by-hop: next = fragment, length 0
  Bytes fragment{IPPROTO_UDP, 0, 0, 0, 0, 0, 0, 9};  // offset 0
  Bytes rest = ext;
  rest.insert(rest.end(), fragment.begin(), fragment.end());
  auto udp = ports(5000, 853);
  rest.insert(rest.end(), udp.begin(), udp.end());
  auto a = decodePacket(ipv6(0, "2001:db8::2", rest));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->protocol, "UDP");
  EXPECT_EQ(a->port, 853);
  auto icmp6 = decodePacket(ipv6(IPPROTO_ICMPV6, "2001:db8::3", Bytes{128, 0, 0, 0}));
  ASSERT_TRUE(icmp6);
  EXPECT_EQ(describe(*icmp6), "ICMPv6 to 2001:db8::3");
}

TEST(BlockedLogDecodeTest, NotAPacketIsNothing) {
  EXPECT_FALSE(decodePacket({}));
  EXPECT_FALSE(decodePacket(Bytes(19, 0x45)));       // IPv4 shorter than its header
  EXPECT_FALSE(decodePacket(Bytes{0x44, 0, 0, 0}));  // IHL below 5
  EXPECT_FALSE(decodePacket(Bytes(39, 0x60)));       // IPv6 shorter than its header
  EXPECT_FALSE(decodePacket(Bytes(60, 0x50)));       // version 5
  Bytes bad_ihl = ipv4(IPPROTO_UDP, {192, 0, 2, 53}, {});
  bad_ihl[0] = 0x4f;  // 60-byte header in a 20-byte packet: no transport header
  auto a = decodePacket(bad_ihl);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->port, 0);
}

TEST(BlockedLogDatagramTest, PacketsAndSequenceNumbersOfEveryMessage) {
  Bytes d = nflogMessage(ipv4(IPPROTO_UDP, {192, 0, 2, 53}, ports(1, 53)), 7);
  Bytes other = nflogMessage(Bytes(20, 0), 99, NLMSG_ERROR);  // not a packet: skipped
  Bytes second = nflogMessage(ipv4(IPPROTO_UDP, {198, 51, 100, 7}, ports(1, 443)), 8);
  d.insert(d.end(), other.begin(), other.end());
  d.insert(d.end(), second.begin(), second.end());
  auto ms = decodeDatagram(d);
  ASSERT_EQ(ms.size(), 2u);
  ASSERT_TRUE(ms[0].attempt);
  EXPECT_EQ(describe(*ms[0].attempt), "UDP to 192.0.2.53:53");
  EXPECT_EQ(ms[0].seq, 7u);
  ASSERT_TRUE(ms[1].attempt);
  EXPECT_EQ(describe(*ms[1].attempt), "UDP to 198.51.100.7:443");
  EXPECT_EQ(ms[1].seq, 8u);
}

TEST(BlockedLogDatagramTest, AnUndecodablePayloadIsStillAMessage) {
  auto ms = decodeDatagram(nflogMessage(Bytes{1, 2, 3}, std::nullopt));
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_FALSE(ms[0].attempt);
  EXPECT_FALSE(ms[0].seq);
}

TEST(BlockedLogDatagramTest, TruncatedMessagesEndTheWalk) {
  Bytes d = nflogMessage(ipv4(IPPROTO_UDP, {192, 0, 2, 53}, ports(1, 53)), 1);
  for (std::size_t cut = 0; cut < d.size(); ++cut) {
    Bytes part(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(cut));
    auto ms = decodeDatagram(part);
    EXPECT_TRUE(ms.empty()) << "cut at " << cut;  // nlmsg_len says more than there is
  }
  // An attribute longer than its message: the message is kept, the attribute is not read.
  Bytes lying = d;
  const std::size_t payload_attr = NLMSG_HDRLEN + 4 + 8;  // after nfgenmsg and PACKET_HDR
  const std::uint16_t huge = 0x7fff;
  std::memcpy(lying.data() + payload_attr, &huge, 2);
  auto ms = decodeDatagram(lying);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_FALSE(ms[0].attempt);
}

TEST(BlockedLogSeqTest, GapsAreLostMessages) {
  SeqTracker t;
  EXPECT_EQ(t.next(5), 0u);  // the first one: nothing known before it
  EXPECT_EQ(t.next(6), 0u);
  EXPECT_EQ(t.next(9), 2u);  // 7 and 8 never arrived
  EXPECT_EQ(t.next(1000), 990u);
  EXPECT_EQ(t.next(1000), 0u);  // a repeat (or going back) is not a loss
  SeqTracker w;
  EXPECT_EQ(w.next(0xfffffffeu), 0u);
  EXPECT_EQ(w.next(1), 2u);  // 0xffffffff and 0: the counter wrapped around
}

TEST(BlockedLogBudgetTest, FirstAttemptsAreRowsThenCounted) {
  RowBudget b(3);
  EXPECT_TRUE(b.take());
  EXPECT_TRUE(b.take());
  EXPECT_TRUE(b.take());
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(b.take());
  EXPECT_EQ(b.drainSuppressed(), 10u);
  EXPECT_EQ(b.drainSuppressed(), 0u);
  EXPECT_FALSE(b.take());
  EXPECT_EQ(b.suppressed(), 1u);
}

// Lost messages (a sequence gap, up to 2^31) are counted in one call: every one is a denial in
// the count, and the list of denials stops at its cap of 1000.
TEST(BlockedLogBudgetTest, LostAttemptsCountInFullAndTheDenialListStaysCapped) {
  Account account("exec-lost");
  account.noteDenied("192.0.2.1", 53, "", "protocol_not_allowed");
  account.noteDenied("", 0, "", "protocol_not_allowed", std::uint64_t{1} << 31);
  Stats s;
  account.addTo(s);
  EXPECT_EQ(s.denied, (std::uint64_t{1} << 31) + 1);
  ASSERT_EQ(s.denials.size(), 1000u);
  EXPECT_EQ(s.denials.front().host, "192.0.2.1");
  EXPECT_EQ(s.denials.back().host, "");
}

// Random bytes, and valid datagrams with random bytes changed, cut or extended: the decoder
// returns (no crash, no read outside the buffer under ASan) whatever it is given.
TEST(BlockedLogFuzzTest, RandomAndMutatedBytesNeverCrash) {
  std::mt19937 rng(1234567);
  std::uniform_int_distribution<int> byte(0, 255);
  std::size_t decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    Bytes b(static_cast<std::size_t>(rng() % 300));
    for (auto& x : b) x = static_cast<std::uint8_t>(byte(rng));
    if (!b.empty() && i % 2 == 0) b[0] = static_cast<std::uint8_t>(i % 4 == 0 ? 0x45 : 0x60);
    if (decodePacket(b)) ++decoded;
    decodeDatagram(b);
  }
  EXPECT_GT(decoded, 0u);  // the version-nibble half decodes: the loop did reach the parsers
  const Bytes valid = nflogMessage(
      ipv6(0, "2001:db8::9", Bytes{IPPROTO_UDP, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 53, 0, 8, 0, 0}), 42);
  for (int i = 0; i < 20000; ++i) {
    Bytes m = valid;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) m[rng() % m.size()] = static_cast<std::uint8_t>(byte(rng));
    if (i % 3 == 0) m.resize(rng() % m.size());
    for (const auto& msg : decodeDatagram(m))
      if (msg.attempt) (void)describe(*msg.attempt);
  }
}

// An nfnetlink_log socket bound to group 1 of the calling thread's namespace, as the runner
// makes it (qthresh 1, sequence numbers), but with the smallest receive buffer the kernel
// allows, so that a burst overflows it. -1 on failure.
int tinyLogSocket() {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return -1;
  sockaddr_nl self{};
  self.nl_family = AF_NETLINK;
  const int tiny = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof self) != 0) return -1;
  Bytes body;
  nfgenmsg g{AF_UNSPEC, NFNETLINK_V0, htons(1)};
  const auto* gp = reinterpret_cast<const std::uint8_t*>(&g);
  body.insert(body.end(), gp, gp + sizeof g);
  attr(body, NFULA_CFG_CMD, Bytes{NFULNL_CFG_CMD_BIND});
  attr(body, NFULA_CFG_MODE, Bytes{0, 0, 0, 128, NFULNL_COPY_PACKET, 0});
  attr(body, NFULA_CFG_FLAGS, Bytes{0, NFULNL_CFG_F_SEQ});
  attr(body, NFULA_CFG_QTHRESH, Bytes{0, 0, 0, 1});
  nlmsghdr h{};
  h.nlmsg_len = static_cast<std::uint32_t>(NLMSG_HDRLEN + body.size());
  h.nlmsg_type = NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG;
  h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  Bytes m(reinterpret_cast<const std::uint8_t*>(&h),
          reinterpret_cast<const std::uint8_t*>(&h) + sizeof h);
  m.insert(m.end(), body.begin(), body.end());
  if (::send(fd, m.data(), m.size(), 0) != static_cast<ssize_t>(m.size())) return -1;
  alignas(nlmsghdr) char reply[256];
  if (::recv(fd, reply, sizeof reply, 0) < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))))
    return -1;
  const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(reinterpret_cast<nlmsghdr*>(reply)));
  return e->error == 0 ? fd : -1;
}

void udpTo(const char* addr, std::uint16_t port) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, addr, &a.sin_addr);
  (void)::sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::close(s);
}

using ProxyFixture = testing::ProxyFixture;
class BlockedLogProxyTest : public ProxyFixture {};

// The proxy's side end to end, in a namespace of the test's own with a reject rule that logs
// (as the runner's does): a burst of 200 datagrams into a log socket far too small for it
// loses most copies in the kernel; the rows still account for every attempt: one row each
// for those read, one "were lost" row with the exact count (the sequence gap the next copy
// shows), and the execution's denials count all of them.
TEST_F(BlockedLogProxyTest, CopiesTheKernelDroppedAreARowWithTheirCount) {
  if (::geteuid() != 0 || std::system("command -v nft >/dev/null") != 0) {
    if (isolationRequired()) FAIL() << "needs root and nft";
    GTEST_SKIP() << "needs root and nft";
  }
  std::string failure;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      failure = "unshare";
      return;
    }
    if (std::system("ip link set lo up && ip route add default dev lo src 127.0.0.1 && printf "
                    "'table inet t {\n chain o { type filter hook output priority 0;\n"
                    "  ip daddr != 127.0.0.0/8 log group 1 snaplen 128 reject\n }\n}\n' | "
                    "nft -f -") != 0) {
      failure = "routes and rules";
      return;
    }
    const int fd = tinyLogSocket();
    if (fd < 0) {
      failure = std::string("log socket: ") + std::strerror(errno);
      return;
    }
    for (int i = 0; i < 200; ++i) udpTo("192.0.2.7", static_cast<std::uint16_t>(5000 + i));
    ListenerIdentity id{execution_id_, matcher_};
    if (auto r = proxy_->adoptBlockedLog(fd, id); !r) {
      failure = r.error().message;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    udpTo("192.0.2.8", 9);  // its copy's sequence number shows the gap
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  t.join();
  ASSERT_EQ(failure, "");
  proxy_->closeExecution(execution_id_);
  std::uint64_t counted = 0, own = 0, lost = 0;
  for (const auto& c : sink_->connections()) {
    if (c.kind != audit::ConnectionKind::kBlocked) continue;
    EXPECT_EQ(c.decision, audit::Decision::kDeny);
    EXPECT_EQ(c.reason, "protocol_not_allowed");
    EXPECT_EQ(c.execution_id, execution_id_);
    if (c.detail.find(" were lost ") != std::string::npos) {
      EXPECT_EQ(c.detail.find("unknown"), std::string::npos) << c.detail;
      lost += std::stoull(c.detail);
    } else {
      ++own;
      EXPECT_TRUE(c.host == "192.0.2.7" || c.host == "192.0.2.8") << c.host;
    }
  }
  counted = own + lost;
  EXPECT_GT(lost, 0u) << "the burst did not overflow the socket: nothing tested";
  EXPECT_EQ(counted, 201u) << own << " rows of their own, " << lost << " lost";
  EXPECT_EQ(proxy_->stats(execution_id_).denied, 201u);
}

}  // namespace
}  // namespace sluice::proxy::blocked
