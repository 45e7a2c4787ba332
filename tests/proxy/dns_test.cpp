// sluice's DNS (Proxy::adoptDns) with real UDP and TCP clients on loopback: synthetic answers
// for names the policy could allow, NXDOMAIN for the rest, audit rows, max_dns_queries, and
// well-formed errors for malformed, truncated, looping, oversized and EDNS queries.
#include <gtest/gtest.h>

#include <cstring>

#include "proxy_test_util.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {
namespace {

using testing::FakeSink;
using Bytes = std::vector<std::uint8_t>;

void put16(Bytes& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}

Bytes header(std::uint16_t id, std::uint16_t flags, std::uint16_t qd, std::uint16_t ar = 0) {
  Bytes b;
  put16(b, id);
  put16(b, flags);
  put16(b, qd);
  put16(b, 0);
  put16(b, 0);
  put16(b, ar);
  return b;
}

void putName(Bytes& b, std::string_view name) {
  while (!name.empty()) {
    auto dot = name.find('.');
    auto label = name.substr(0, dot);
    b.push_back(static_cast<std::uint8_t>(label.size()));
    b.insert(b.end(), label.begin(), label.end());
    name = dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
  }
  b.push_back(0);
}

// OPT record: root name, type 41, class = payload size, TTL = ext rcode/version/flags.
void putOpt(Bytes& b, std::uint16_t payload, std::uint8_t version = 0) {
  b.push_back(0);
  put16(b, 41);
  put16(b, payload);
  b.push_back(0);
  b.push_back(version);
  put16(b, 0);
  put16(b, 0);
}

Bytes query(std::uint16_t id, std::string_view name, std::uint16_t type, bool edns = false,
            std::uint16_t klass = 1) {
  Bytes b = header(id, 0x0100, 1, edns ? 1 : 0);
  putName(b, name);
  put16(b, type);
  put16(b, klass);
  if (edns) putOpt(b, 1232);
  return b;
}

struct Reply {
  bool got = false;
  Bytes raw;
  std::uint16_t id() const {
    return raw.size() < 12 ? 0 : static_cast<std::uint16_t>((raw[0] << 8) | raw[1]);
  }
  std::uint16_t flags() const {
    return raw.size() < 12 ? 0 : static_cast<std::uint16_t>((raw[2] << 8) | raw[3]);
  }
  int rcode() const { return raw.size() < 12 ? -1 : flags() & 0xF; }
  bool tc() const { return flags() & 0x0200; }
  std::uint16_t count(int i) const {
    if (raw.size() < 12) return 0;
    return static_cast<std::uint16_t>((raw[4 + 2 * i] << 8) | raw[5 + 2 * i]);
  }
  // The one answer's address (the answer ends the message, or precedes the 11-byte OPT).
  std::optional<policy::IpAddress> address(bool edns = false) const {
    if (count(1) != 1 || raw.size() < 12 + 16 + (edns ? 11 : 0)) return std::nullopt;
    std::size_t end = raw.size() - (edns ? 11 : 0);
    std::size_t rdlen = end >= 12 + 28 ? (raw[end - 2 - 16] << 8) | raw[end - 1 - 16] : 0;
    if (rdlen == 16) {
      std::array<std::uint8_t, 16> a{};
      std::memcpy(a.data(), raw.data() + end - 16, 16);
      return policy::IpAddress::v6(a);
    }
    if (((raw[end - 6] << 8) | raw[end - 5]) != 4) return std::nullopt;
    return policy::IpAddress::v4((std::uint32_t{raw[end - 4]} << 24) |
                                 (std::uint32_t{raw[end - 3]} << 16) |
                                 (std::uint32_t{raw[end - 2]} << 8) | raw[end - 1]);
  }
  std::uint32_t answerTtl(bool edns = false) const {
    std::size_t end = raw.size() - (edns ? 11 : 0);
    std::size_t rdlen = (raw[end - 6] << 8) | raw[end - 5];
    if (rdlen != 4) rdlen = 16;
    std::size_t ttl_at = end - rdlen - 6;
    return (std::uint32_t{raw[ttl_at]} << 24) | (std::uint32_t{raw[ttl_at + 1]} << 16) |
           (std::uint32_t{raw[ttl_at + 2]} << 8) | raw[ttl_at + 3];
  }
};

int boundSocket(int type, std::uint16_t& port) {
  int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  if (type == SOCK_STREAM && ::listen(fd, 64) != 0) return -1;
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

void setTimeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// A UDP client (one socket for many queries).
class UdpClient {
 public:
  explicit UdpClient(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    setTimeout(fd_, 2000);
  }
  ~UdpClient() { ::close(fd_); }
  Reply ask(const Bytes& q, int timeout_ms = 2000) {
    setTimeout(fd_, timeout_ms);
    Reply r;
    if (::send(fd_, q.data(), q.size(), 0) != static_cast<ssize_t>(q.size())) return r;
    Bytes buf(65536);
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) return r;
    buf.resize(static_cast<std::size_t>(n));
    r.raw = std::move(buf);
    r.got = true;
    return r;
  }

 private:
  int fd_;
};

Bytes framed(const Bytes& q) {
  Bytes b;
  put16(b, static_cast<std::uint16_t>(q.size()));
  b.insert(b.end(), q.begin(), q.end());
  return b;
}

// Reads one length-prefixed TCP DNS message.
Reply readFramed(testing::Client& c) {
  Reply r;
  std::string len = c.readN(2);
  if (len.size() != 2) return r;
  std::size_t n = (static_cast<std::uint8_t>(len[0]) << 8) | static_cast<std::uint8_t>(len[1]);
  std::string body = c.readN(n);
  if (body.size() != n) return r;
  r.raw.assign(body.begin(), body.end());
  r.got = true;
  return r;
}

std::string asString(const Bytes& b) { return std::string(b.begin(), b.end()); }

class DnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_shared<FakeSink>();
    ProxyOptions o;
    o.threads = 2;
    auto p = Proxy::create(o, sink_, nullptr);
    ASSERT_TRUE(p) << p.error().message;
    proxy_ = std::move(*p);
    proxy_->start();
    adopt("exec-dns", 2000);
  }
  void TearDown() override { proxy_->stop(); }

  // `tweak` adjusts the identity (a shadow policy, learn mode) before it is adopted.
  void adopt(const std::string& execution, std::uint64_t max_queries,
             const std::function<void(ListenerIdentity&)>& tweak = {}) {
    std::string yaml =
        "apiVersion: sluice/v1\nkind: Workflow\nname: dns\negress:\n  rules:\n"
        "    - {id: pypi, action: allow, hosts: [pypi.org, \"*.allowed.example\"], ports: [443]}\n"
        "    - {id: git, action: allow, hosts: [\"re:git[0-9]*\\\\.example\\\\.net\"], ports: "
        "[22]}\n"
        "    - {id: no, action: deny, hosts: [secret.allowed.example]}\n"
        "  limits: {max_dns_queries: " +
        std::to_string(max_queries) + "}\n";
    auto w = policy::parseWorkflow(yaml, "dns.yaml");
    ASSERT_TRUE(w) << w.error().str();
    matcher_ = policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w)));
    names_ = std::make_shared<SyntheticNames>();
    int udp = boundSocket(SOCK_DGRAM, udp_port_);
    int tcp = boundSocket(SOCK_STREAM, tcp_port_);
    ASSERT_GE(udp, 0);
    ASSERT_GE(tcp, 0);
    ListenerIdentity id(execution, matcher_);
    id.names = names_;
    if (tweak) tweak(id);
    auto r = proxy_->adoptDns(udp, tcp, id);
    ASSERT_TRUE(r) << r.error().message;
  }

  std::shared_ptr<FakeSink> sink_;
  std::unique_ptr<Proxy> proxy_;
  std::shared_ptr<const policy::Matcher> matcher_;
  std::shared_ptr<SyntheticNames> names_;
  std::uint16_t udp_port_ = 0;
  std::uint16_t tcp_port_ = 0;
};

TEST_F(DnsTest, AllowedNameGetsSyntheticAddressesThatMapBack) {
  UdpClient c(udp_port_);
  Reply a = c.ask(query(0x1111, "PyPI.org", 1));
  ASSERT_TRUE(a.got);
  EXPECT_EQ(a.id(), 0x1111);
  EXPECT_TRUE(a.flags() & 0x8000);
  EXPECT_EQ(a.rcode(), 0);
  ASSERT_EQ(a.count(1), 1);
  auto v4 = a.address();
  ASSERT_TRUE(v4);
  EXPECT_TRUE(v4->isV4());
  EXPECT_TRUE(SyntheticNames::isSynthetic(*v4)) << v4->str();
  EXPECT_EQ(names_->nameOf(*v4), "pypi.org");
  EXPECT_EQ(a.answerTtl(), 1u);
  // The question is echoed with the case it was sent in (0x20 checks of stub resolvers).
  EXPECT_NE(asString(a.raw).find("PyPI"), std::string::npos);

  Reply aaaa = c.ask(query(0x2222, "files.allowed.example", 28));
  ASSERT_TRUE(aaaa.got);
  EXPECT_EQ(aaaa.rcode(), 0);
  auto v6 = aaaa.address();
  ASSERT_TRUE(v6);
  EXPECT_FALSE(v6->isV4());
  EXPECT_TRUE(SyntheticNames::isSynthetic(*v6)) << v6->str();
  EXPECT_EQ(names_->nameOf(*v6), "files.allowed.example");
  // The same name keeps its address; a regex-allowed name on another port resolves too.
  EXPECT_EQ(c.ask(query(3, "pypi.org", 1)).address(), v4);
  EXPECT_TRUE(c.ask(query(4, "git7.example.net", 1)).address());

  ASSERT_GE(sink_->waitDnsCount(4), 4u);
  auto rows = sink_->dns();
  EXPECT_EQ(rows[0].execution_id, "exec-dns");
  EXPECT_EQ(rows[0].workflow, "dns");
  EXPECT_EQ(rows[0].name, "pypi.org");
  EXPECT_EQ(rows[0].qtype, "A");
  EXPECT_EQ(rows[0].answer, v4->str());
  EXPECT_EQ(rows[0].decision, audit::Decision::kAllow);
  EXPECT_EQ(rows[1].qtype, "AAAA");
  EXPECT_EQ(rows[1].answer, v6->str());
  // The rule whose host pattern made each name answerable.
  EXPECT_EQ(rows[0].rule_id, "pypi");
  EXPECT_EQ(rows[1].rule_id, "pypi");
  EXPECT_EQ(rows[3].rule_id, "git");
}

TEST_F(DnsTest, OtherNamesGetNxDomain) {
  UdpClient c(udp_port_);
  for (auto name : {"evil.example", "allowed.example", "secret.allowed.example", "pypi.org.evil",
                    "127.0.0.1", "git.example.org"}) {
    Reply r = c.ask(query(7, name, 1));
    ASSERT_TRUE(r.got) << name;
    EXPECT_EQ(r.rcode(), 3) << name;
    EXPECT_EQ(r.count(1), 0) << name;
  }
  ASSERT_GE(sink_->waitDnsCount(6), 6u);
  for (const auto& row : sink_->dns()) {
    EXPECT_EQ(row.decision, audit::Decision::kDeny);
    EXPECT_EQ(row.answer, "NXDOMAIN");
    // secret.allowed.example: pypi's *.allowed.example matches it on 443, but deny rule `no`
    // covers 443 (its default ports), so `no` decided it; the others no rule matches at all.
    const bool by_deny = row.name == "secret.allowed.example";
    EXPECT_EQ(row.reason, by_deny ? "denied_by_rule" : "no_matching_rule") << row.name;
    EXPECT_EQ(row.rule_id, by_deny ? "no" : "") << row.name;
  }
  EXPECT_EQ(names_->size(), 0u);
}

// Learn mode answers a name no rule names (recorded would_deny), never one a deny rule names;
// a shadow policy's answer is in every row.
TEST_F(DnsTest, LearnModeAnswersUnnamedNamesAndRowsCarryTheShadowsAnswer) {
  auto candidate = policy::parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: next\negress:\n  rules:\n"
      "    - {id: evil-ok, action: allow, hosts: [evil.example], ports: [443]}\n",
      "next.yaml");
  ASSERT_TRUE(candidate);
  auto shadow =
      policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*candidate)));
  adopt("exec-learn", 100, [&](ListenerIdentity& id) {
    id.learn = true;
    id.shadow = shadow;
  });
  UdpClient c(udp_port_);
  Reply learned = c.ask(query(1, "evil.example", 1));
  ASSERT_TRUE(learned.got);
  EXPECT_EQ(learned.rcode(), 0);
  EXPECT_TRUE(learned.address());
  Reply denied = c.ask(query(2, "secret.allowed.example", 1));
  ASSERT_TRUE(denied.got);
  EXPECT_EQ(denied.rcode(), 3);
  Reply allowed = c.ask(query(3, "pypi.org", 1));
  ASSERT_TRUE(allowed.got);
  EXPECT_EQ(allowed.rcode(), 0);
  ASSERT_GE(sink_->waitDnsCount(3), 3u);
  std::map<std::string, audit::DnsEvent> rows;
  for (const auto& row : sink_->dns()) rows[row.name] = row;
  EXPECT_EQ(rows["evil.example"].decision, audit::Decision::kWouldDeny);
  EXPECT_EQ(rows["evil.example"].reason, "no_matching_rule");
  EXPECT_EQ(rows["evil.example"].stamp.shadow_decision, audit::Verdict::kAllow);
  EXPECT_EQ(rows["evil.example"].stamp.shadow_rule, "evil-ok");
  EXPECT_EQ(rows["secret.allowed.example"].decision, audit::Decision::kDeny);
  EXPECT_EQ(rows["secret.allowed.example"].stamp.shadow_decision, audit::Verdict::kDeny);
  EXPECT_EQ(rows["pypi.org"].decision, audit::Decision::kAllow);
  EXPECT_EQ(rows["pypi.org"].stamp.shadow_decision, audit::Verdict::kDeny);
}

TEST_F(DnsTest, ExfiltrationBySubdomainsIsAuditedThenRefused) {
  // Thousands of unique subdomains of a denied suffix (data encoded in the labels): every one
  // NXDOMAIN and an audit row, never an address; past max_dns_queries (2000), REFUSED.
  UdpClient c(udp_port_);
  for (int i = 0; i < 2000; ++i) {
    std::string name = "c2V" + std::to_string(i) + "x.exfil.evil.example";
    Reply r = c.ask(query(static_cast<std::uint16_t>(i), name, i % 2 ? 16 : 1));
    ASSERT_TRUE(r.got) << i;
    ASSERT_EQ(r.rcode(), 3) << i;
  }
  Reply over = c.ask(query(9999, "pypi.org", 1));
  ASSERT_TRUE(over.got);
  EXPECT_EQ(over.rcode(), 5);
  EXPECT_EQ(over.count(1), 0);
  ASSERT_GE(sink_->waitDnsCount(2001), 2001u);
  auto rows = sink_->dns();
  for (std::size_t i = 0; i < 2000; ++i) {
    ASSERT_EQ(rows[i].decision, audit::Decision::kDeny);
    ASSERT_EQ(rows[i].name, "c2v" + std::to_string(i) + "x.exfil.evil.example");
  }
  EXPECT_EQ(rows[2000].answer, "REFUSED");
  EXPECT_EQ(rows[2000].reason, "limit_exceeded");
  EXPECT_EQ(names_->size(), 0u);
  // TCP counts against the same budget.
  testing::Client t(tcp_port_);
  ASSERT_TRUE(t.send(asString(framed(query(1, "pypi.org", 1)))));
  EXPECT_EQ(readFramed(t).rcode(), 5);
}

TEST_F(DnsTest, OtherTypesGetNoDataForAllowedNamesOnly) {
  UdpClient c(udp_port_);
  for (std::uint16_t type : {16, 15, 255, 33, 65}) {  // TXT, MX, ANY, SRV, HTTPS
    Reply ok = c.ask(query(1, "pypi.org", type));
    ASSERT_TRUE(ok.got);
    EXPECT_EQ(ok.rcode(), 0) << type;
    EXPECT_EQ(ok.count(1), 0) << type;
    Reply no = c.ask(query(2, "evil.example", type));
    ASSERT_TRUE(no.got);
    EXPECT_EQ(no.rcode(), 3) << type;
  }
  ASSERT_GE(sink_->waitDnsCount(10), 10u);
  auto rows = sink_->dns();
  EXPECT_EQ(rows[0].qtype, "TXT");
  EXPECT_EQ(rows[0].answer, "NODATA");
  EXPECT_EQ(rows[0].decision, audit::Decision::kAllow);
  EXPECT_EQ(names_->size(), 0u);  // no address handed out for TXT
}

TEST_F(DnsTest, MalformedQueriesGetWellFormedErrors) {
  UdpClient c(udp_port_);
  auto expectError = [&](const Bytes& q, int rcode, const char* what) {
    Reply r = c.ask(q);
    ASSERT_TRUE(r.got) << what;
    ASSERT_GE(r.raw.size(), 12u) << what;
    EXPECT_EQ(r.id(), (q[0] << 8) | q[1]) << what;
    EXPECT_TRUE(r.flags() & 0x8000) << what;
    EXPECT_EQ(r.rcode(), rcode) << what;
    EXPECT_EQ(r.count(1), 0) << what;
    EXPECT_LE(r.raw.size(), 512u) << what;
  };
  Bytes full = query(0x0101, "pypi.org", 1);
  expectError(Bytes(full.begin(), full.begin() + 5), 1, "shorter than a header");
  expectError(Bytes(full.begin(), full.begin() + 12), 1, "header only");
  expectError(Bytes(full.begin(), full.begin() + 18), 1, "truncated name");
  expectError(Bytes(full.begin(), full.end() - 1), 1, "truncated class");
  Bytes trailing = full;
  trailing.push_back(0);
  expectError(trailing, 1, "trailing byte");

  Bytes loop = header(0x0202, 0x0100, 1);
  loop.insert(loop.end(), {0xC0, 0x0C, 0, 1, 0, 1});  // points at itself
  expectError(loop, 1, "pointer to itself");
  Bytes loop2 = header(0x0203, 0x0100, 1);
  loop2.insert(loop2.end(), {0x01, 'a', 0xC0, 0x0C, 0, 1, 0, 1});  // a -> a -> ...
  expectError(loop2, 1, "pointer loop");
  Bytes forward = header(0x0204, 0x0100, 1);
  forward.insert(forward.end(), {0xC0, 0x10, 0x00, 0, 1, 0, 1});
  expectError(forward, 1, "forward pointer");
  Bytes long_label = header(0x0205, 0x0100, 1);
  long_label.push_back(0x40);  // label type 01: reserved
  long_label.insert(long_label.end(), {0, 0, 1, 0, 1});
  expectError(long_label, 1, "reserved label type");
  Bytes too_long = header(0x0206, 0x0100, 1);
  for (int i = 0; i < 5; ++i) {
    too_long.push_back(63);
    too_long.insert(too_long.end(), 63, 'a');
  }
  too_long.insert(too_long.end(), {0, 0, 1, 0, 1});
  expectError(too_long, 1, "name over 255 bytes");

  Bytes two = header(0x0301, 0x0100, 2);
  putName(two, "pypi.org");
  two.insert(two.end(), {0, 1, 0, 1});
  putName(two, "evil.example");
  two.insert(two.end(), {0, 1, 0, 1});
  expectError(two, 1, "two questions");
  expectError(header(0x0302, 0x0100, 0), 1, "no question");

  Bytes status = query(0x0401, "pypi.org", 1);
  status[2] = 0x10;  // opcode 2 (STATUS)
  expectError(status, 4, "opcode STATUS");
  expectError(query(0x0402, "pypi.org", 252), 4, "AXFR");
  expectError(query(0x0403, "version.bind", 16, false, 3), 5, "class CH");

  // Oversized: more than 512 bytes over UDP without EDNS (padding in an additional record).
  Bytes big = header(0x0501, 0x0100, 1, 1);
  putName(big, "pypi.org");
  big.insert(big.end(), {0, 1, 0, 1});
  big.push_back(0);
  put16(big, 16);  // TXT record as padding
  put16(big, 1);
  put16(big, 0);
  put16(big, 0);
  put16(big, 600);
  big.insert(big.end(), 600, 'x');
  expectError(big, 1, "oversized without EDNS");

  // A response is never answered (no reflection loops).
  Bytes response = query(0x0601, "pypi.org", 1);
  response[2] |= 0x80;
  EXPECT_FALSE(c.ask(response, 300).got);

  ASSERT_GE(sink_->waitDnsCount(16), 16u);
  for (const auto& row : sink_->dns())
    EXPECT_EQ(row.decision, audit::Decision::kDeny) << row.answer;
}

TEST_F(DnsTest, EdnsQueriesGetAnOptRecord) {
  UdpClient c(udp_port_);
  Reply r = c.ask(query(0x0701, "pypi.org", 1, true));
  ASSERT_TRUE(r.got);
  EXPECT_EQ(r.rcode(), 0);
  EXPECT_EQ(r.count(3), 1);  // OPT
  auto a = r.address(true);
  ASSERT_TRUE(a);
  EXPECT_EQ(names_->nameOf(*a), "pypi.org");
  // The OPT record closes the message: root, type 41, our payload size 1232.
  const auto& b = r.raw;
  ASSERT_GE(b.size(), 11u);
  EXPECT_EQ(b[b.size() - 11], 0);
  EXPECT_EQ((b[b.size() - 10] << 8) | b[b.size() - 9], 41);
  EXPECT_EQ((b[b.size() - 8] << 8) | b[b.size() - 7], 1232);

  // EDNS version 1: BADVERS (extended rcode 1 in the OPT record, header rcode 0).
  Bytes v1 = header(0x0702, 0x0100, 1, 1);
  putName(v1, "pypi.org");
  v1.insert(v1.end(), {0, 1, 0, 1});
  putOpt(v1, 1232, 1);
  Reply bad = c.ask(v1);
  ASSERT_TRUE(bad.got);
  EXPECT_EQ(bad.rcode(), 0);
  EXPECT_EQ(bad.count(1), 0);
  EXPECT_EQ(bad.raw[bad.raw.size() - 7 + 1], 1);  // extended rcode

  // Two OPT records: FORMERR. An EDNS option that overruns its record: FORMERR.
  Bytes two = header(0x0703, 0x0100, 1, 2);
  putName(two, "pypi.org");
  two.insert(two.end(), {0, 1, 0, 1});
  putOpt(two, 1232);
  putOpt(two, 1232);
  Reply r2 = c.ask(two);
  ASSERT_TRUE(r2.got);
  EXPECT_EQ(r2.rcode(), 1);
  Bytes overrun = header(0x0704, 0x0100, 1, 1);
  putName(overrun, "pypi.org");
  overrun.insert(overrun.end(), {0, 1, 0, 1, 0, 0, 41, 4, 0xD0, 0, 0, 0, 0, 0, 4, 0, 10, 0, 8});
  Reply r3 = c.ask(overrun);
  ASSERT_TRUE(r3.got);
  EXPECT_EQ(r3.rcode(), 1);

  // A compression pointer in an additional record's name may point back at the question; one
  // that points at itself is a loop.
  Bytes cookie = header(0x0706, 0x0100, 1, 1);
  putName(cookie, "pypi.org");
  cookie.insert(cookie.end(), {0, 1, 0, 1, 0xC0, 0x0C, 0, 16, 0, 1, 0, 0, 0, 0, 0, 1, 'x'});
  Reply r5 = c.ask(cookie);
  ASSERT_TRUE(r5.got);
  EXPECT_EQ(r5.rcode(), 0);
  Bytes self_loop = header(0x0707, 0x0100, 1, 1);
  putName(self_loop, "pypi.org");
  self_loop.insert(self_loop.end(), {0, 1, 0, 1, 0xC0, 26, 0, 16, 0, 1, 0, 0, 0, 0, 0, 0});
  Reply r6 = c.ask(self_loop);
  ASSERT_TRUE(r6.got);
  EXPECT_EQ(r6.rcode(), 1);

  // A large EDNS query (with padding) is fine: the limit is EDNS's.
  Bytes padded = header(0x0705, 0x0100, 1, 1);
  putName(padded, "pypi.org");
  padded.insert(padded.end(), {0, 1, 0, 1, 0, 0, 41, 4, 0xD0, 0, 0, 0, 0});
  put16(padded, 804);
  put16(padded, 12);  // RFC 7830 padding option
  put16(padded, 800);
  padded.insert(padded.end(), 800, 0);
  Reply r4 = c.ask(padded);
  ASSERT_TRUE(r4.got);
  EXPECT_EQ(r4.rcode(), 0);
  EXPECT_LE(r4.raw.size(), 512u);  // no amplification: the answer is small
}

TEST_F(DnsTest, TcpFramingAndTwoQueriesInOneWrite) {
  testing::Client t(tcp_port_);
  ASSERT_TRUE(t.ok());
  Bytes both = framed(query(0x0801, "pypi.org", 1));
  Bytes second = framed(query(0x0802, "evil.example", 28));
  both.insert(both.end(), second.begin(), second.end());
  ASSERT_TRUE(t.send(asString(both)));
  Reply a = readFramed(t);
  Reply b = readFramed(t);
  ASSERT_TRUE(a.got);
  ASSERT_TRUE(b.got);
  EXPECT_EQ(a.id(), 0x0801);
  EXPECT_EQ(a.rcode(), 0);
  ASSERT_TRUE(a.address());
  EXPECT_EQ(names_->nameOf(*a.address()), "pypi.org");
  EXPECT_EQ(b.id(), 0x0802);
  EXPECT_EQ(b.rcode(), 3);
  // A query split across writes, and a malformed one, on the same connection.
  Bytes q = framed(query(0x0803, "x.allowed.example", 28));
  ASSERT_TRUE(t.send(asString(Bytes(q.begin(), q.begin() + 5))));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(t.send(asString(Bytes(q.begin() + 5, q.end()))));
  Reply c = readFramed(t);
  ASSERT_TRUE(c.got);
  EXPECT_EQ(c.id(), 0x0803);
  EXPECT_TRUE(c.address());
  Bytes loop = header(0x0804, 0x0100, 1);
  loop.insert(loop.end(), {0xC0, 0x0C, 0, 1, 0, 1});
  ASSERT_TRUE(t.send(asString(framed(loop))));
  Reply d = readFramed(t);
  ASSERT_TRUE(d.got);
  EXPECT_EQ(d.rcode(), 1);
  // A UDP-sized limit does not apply over TCP: an oversized query without EDNS is fine.
  Bytes big = header(0x0805, 0x0100, 1, 1);
  putName(big, "pypi.org");
  big.insert(big.end(), {0, 1, 0, 1, 0, 0, 16, 0, 1, 0, 0, 0, 0});
  put16(big, 600);
  big.insert(big.end(), 600, 'x');
  ASSERT_TRUE(t.send(asString(framed(big))));
  Reply e = readFramed(t);
  ASSERT_TRUE(e.got);
  EXPECT_EQ(e.rcode(), 0);
  ASSERT_GE(sink_->waitDnsCount(5), 5u);
}

TEST_F(DnsTest, CloseExecutionClosesItsDnsSockets) {
  UdpClient c(udp_port_);
  ASSERT_TRUE(c.ask(query(1, "pypi.org", 1)).got);
  proxy_->closeExecution("exec-dns");
  EXPECT_FALSE(c.ask(query(2, "pypi.org", 1), 300).got);
  testing::Client t(tcp_port_, std::chrono::milliseconds(500));
  if (t.ok()) {  // the port is closed: connect fails, or nothing answers
    t.send(asString(framed(query(3, "pypi.org", 1))));
    EXPECT_FALSE(readFramed(t).got);
  }
}

TEST_F(DnsTest, AdoptDnsRefusesWhatItCannotServe) {
  ListenerIdentity id("exec-x", matcher_);
  id.names = std::make_shared<SyntheticNames>();
  auto none = proxy_->adoptDns(-1, -1, id);
  ASSERT_FALSE(none);
  int stream = ::socket(AF_INET, SOCK_STREAM, 0);
  auto r = proxy_->adoptDns(-1, stream, id);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not listening"), std::string::npos);
  std::uint16_t port = 0;
  int tcp = boundSocket(SOCK_STREAM, port);
  auto swapped = proxy_->adoptDns(tcp, -1, id);
  ASSERT_FALSE(swapped);
  EXPECT_NE(swapped.error().message.find("not a UDP socket"), std::string::npos);
  ListenerIdentity no_names("exec-x", matcher_);
  int udp = boundSocket(SOCK_DGRAM, port);
  auto r2 = proxy_->adoptDns(udp, -1, no_names);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message.find("synthetic"), std::string::npos);
}

TEST_F(DnsTest, UdpOnlyAndReloadedPolicy) {
  std::uint16_t port = 0;
  int udp = boundSocket(SOCK_DGRAM, port);
  ListenerIdentity id("exec-udp", matcher_);
  id.names = std::make_shared<SyntheticNames>();
  ASSERT_TRUE(proxy_->adoptDns(udp, -1, id));
  UdpClient c(port);
  EXPECT_EQ(c.ask(query(1, "new.example", 1)).rcode(), 3);
  auto w = policy::parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: dns\negress:\n  rules:\n"
      "    - {id: n, action: allow, hosts: [new.example]}\n",
      "dns.yaml");
  ASSERT_TRUE(w);
  proxy_->replaceMatcher(
      "dns", policy::Matcher::compile(std::make_shared<const policy::Workflow>(std::move(*w))));
  EXPECT_EQ(c.ask(query(2, "new.example", 1)).rcode(), 0);
  EXPECT_EQ(c.ask(query(3, "pypi.org", 1)).rcode(), 3);
}

TEST_F(DnsTest, TheExecutionsStatsCountItsQueriesAndDenials) {
  // An execution with a proxy listener: its DNS queries are counted in its stats (the
  // receipt's network.dns), and stay there once the execution is closed.
  ListenerIdentity id("exec-counted", matcher_);
  id.names = std::make_shared<SyntheticNames>();
  ASSERT_TRUE(proxy_->listen("127.0.0.1", 0, id));
  std::uint16_t udp_port = 0, tcp_port = 0;
  const int udp = boundSocket(SOCK_DGRAM, udp_port);
  const int tcp = boundSocket(SOCK_STREAM, tcp_port);
  ASSERT_TRUE(proxy_->adoptDns(udp, tcp, id));
  UdpClient c(udp_port);
  EXPECT_EQ(c.ask(query(1, "pypi.org", 1)).rcode(), 0);                // allowed
  EXPECT_EQ(c.ask(query(2, "pypi.org", 16)).rcode(), 0);               // NODATA: allowed
  EXPECT_EQ(c.ask(query(3, "evil.example", 1)).rcode(), 3);            // denied
  EXPECT_EQ(c.ask(query(4, "secret.allowed.example", 1)).rcode(), 3);  // denied by rule
  testing::Client t(tcp_port);
  ASSERT_TRUE(t.send(asString(framed(query(5, "x.evil.example", 16)))));
  EXPECT_EQ(readFramed(t).rcode(), 3);
  Stats s = proxy_->stats("exec-counted");
  EXPECT_EQ(s.dns_queries, 5u);
  EXPECT_EQ(s.dns_denied, 3u);
  EXPECT_EQ(s.denied, 0u);  // DNS answers are not connection denials
  // The DNS of another execution (the fixture's) is not counted here.
  UdpClient other(udp_port_);
  EXPECT_EQ(other.ask(query(6, "evil.example", 1)).rcode(), 3);
  proxy_->closeExecution("exec-counted");
  s = proxy_->stats("exec-counted");
  EXPECT_EQ(s.dns_queries, 5u);
  EXPECT_EQ(s.dns_denied, 3u);
}

TEST(SyntheticNames, StableAddressesThatMapBack) {
  SyntheticNames n;
  auto a = n.v4For("pypi.org");
  auto b = n.v4For("files.example");
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(n.v4For("pypi.org"), a);
  EXPECT_EQ(a->str(), "198.18.0.1");
  auto v6 = n.v6For("pypi.org");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->str(), "64:ff9b:1::1");
  EXPECT_EQ(n.nameOf(*a), "pypi.org");
  EXPECT_EQ(n.nameOf(*v6), "pypi.org");
  EXPECT_EQ(n.nameOf(*n.v6For("files.example")), "files.example");
  EXPECT_EQ(n.size(), 2u);
  // In the ranges but never handed out; outside the ranges.
  EXPECT_FALSE(n.nameOf(policy::IpAddress::v4((198u << 24) | (19u << 16) | 5)));
  EXPECT_TRUE(SyntheticNames::isSynthetic(policy::IpAddress::v4((198u << 24) | (19u << 16) | 5)));
  EXPECT_FALSE(SyntheticNames::isSynthetic(*policy::parseIpLiteral("198.20.0.1")));
  EXPECT_FALSE(SyntheticNames::isSynthetic(*policy::parseIpLiteral("64:ff9b::1")));
  EXPECT_FALSE(n.nameOf(*policy::parseIpLiteral("10.0.0.1")));
}

}  // namespace
}  // namespace sluice::proxy
