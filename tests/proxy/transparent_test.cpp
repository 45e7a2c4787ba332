// Transparent capture, proxy side: which name a redirected connection is decided by, and
// redirected connections end to end — a network namespace made by the test (only lo, a default
// route via lo, an nftables REDIRECT of TCP to the proxy listener inside it) whose client
// connects to a synthetic DNS address, to an address with an allowed Host, and to a denied one.
#include "transparent.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "https_upstream.hpp"
#include "isolation.hpp"
#include "proxy_fixture.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/certificate_authority.hpp"

namespace sluice::proxy::testing {
namespace {

TEST(Transparent, TheNameComesFromTheMapThenTheOpeningThenTheAddress) {
  SyntheticNames names;
  auto a = names.v4For("upstream.test");
  ASSERT_TRUE(a);
  tcp::endpoint synthetic(net::ip::make_address(a->str()), 443);
  EXPECT_EQ(transparentHost(synthetic, &names, {Peeked::kFound, "evil.test"}), "upstream.test");
  tcp::endpoint other(net::ip::make_address("203.0.113.7"), 80);
  EXPECT_EQ(transparentHost(other, &names, {Peeked::kFound, "upstream.test"}), "upstream.test");
  EXPECT_EQ(transparentHost(other, &names, {Peeked::kAbsent, ""}), "203.0.113.7");
  tcp::endpoint v6(net::ip::make_address("2001:db8::1"), 443);
  EXPECT_EQ(transparentHost(v6, nullptr, {Peeked::kAbsent, ""}), "[2001:db8::1]");
  auto six = names.v6For("upstream.test");
  ASSERT_TRUE(six);
  EXPECT_EQ(names.nameOf(*six), "upstream.test");
  EXPECT_TRUE(SyntheticNames::isSynthetic(*a));
  EXPECT_FALSE(SyntheticNames::isSynthetic(*policy::parseIpLiteral("198.20.0.1")));
}

// Sends `fd` over the Unix socket `sock`.
void sendFd(int sock, int fd) {
  char c = 'f';
  iovec iov{&c, 1};
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  cmsghdr* cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  (void)::sendmsg(sock, &m, 0);
}

int recvFd(int sock) {
  char c;
  iovec iov{&c, 1};
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  if (::recvmsg(sock, &m, 0) != 1) return -1;
  cmsghdr* cm = CMSG_FIRSTHDR(&m);
  if (!cm) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof fd);
  return fd;
}

// One HTTP GET from inside the namespace to `ip`:`port` (plain TCP, no proxy configured);
// the status code, or a negative number for a connection error / reset.
int getFrom(const std::string& ip, std::uint16_t port, const std::string& host,
            const std::string& path = "/v1/ok") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  char buf[64] = {};
  ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n < 0) return -(100 + errno);
  if (n < 12) return -(200 + static_cast<int>(n));
  return std::atoi(buf + 9);
}

class TransparentNetnsTest : public ProxyFixture {
 protected:
  // Every test here makes a network namespace with nft rules: without root and nft it is
  // skipped (failed where CI demands isolation), before the proxy starts.
  void SetUp() override {
    if (::geteuid() != 0 || std::system("command -v nft >/dev/null") != 0) {
      if (isolationRequired()) FAIL() << "needs root and nft";
      GTEST_SKIP() << "needs root and nft";
    }
    ProxyFixture::SetUp();
  }

  // A sandbox's listener identity: its DNS names give upstream.test the synthetic IPv4 address
  // returned beside it ("" and a test failure if none could be given).
  std::pair<ListenerIdentity, std::string> identityWithNames() {
    auto names = std::make_shared<SyntheticNames>();
    const auto synthetic = names->v4For("upstream.test");
    EXPECT_TRUE(synthetic);
    ListenerIdentity id{"exec-transparent", matcher_};
    id.names = names;
    return {id, synthetic ? synthetic->str() : ""};
  }

  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: transparent\negress:\n  rules:\n"
           "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n";
  }

  // A child in a network namespace of its own, made like the runner makes a sandbox's: lo, a
  // default route via lo, and TCP to anything but loopback redirected to its listener at
  // 127.0.0.1:3128, which the proxy adopts with `id`. The child then runs `probes` (HTTP GETs
  // from inside) and their results come back, one int each; empty if something failed (with a
  // test failure).
  std::vector<int> probeFromRedirectedNetns(const ListenerIdentity& id, std::size_t count,
                                            const std::function<std::vector<int>()>& probes) {
    int sv[2], results[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
        ::pipe2(results, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "socketpair/pipe: " << std::strerror(errno);
      return {};
    }
    pid_t child = ::fork();
    if (child == 0) {
      ::close(sv[0]);
      ::close(results[0]);
      if (::unshare(CLONE_NEWNET) != 0) ::_exit(10);
      // `src 127.0.0.1`: without it a connection to a routed address gets source 0.0.0.0, and
      // the redirected replies go nowhere.
      if (std::system("ip link set lo up && ip route add default dev lo src 127.0.0.1 && "
                      "printf 'table inet t {\\n chain out { type nat hook output priority -100;\\n"
                      "  ip daddr != 127.0.0.0/8 tcp dport != 3128 redirect to :3128\\n }\\n}\\n' "
                      "| nft -f -") != 0)
        ::_exit(11);
      int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(3128);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 16) != 0)
        ::_exit(12);
      sendFd(sv[1], l);
      char go;
      if (::read(sv[1], &go, 1) != 1) ::_exit(13);  // the proxy has it
      const std::vector<int> r = probes();
      (void)::write(results[1], r.data(), r.size() * sizeof(int));
      ::_exit(0);
    }
    ::close(sv[1]);
    ::close(results[1]);
    std::vector<int> r(count, 0);
    const int fd = recvFd(sv[0]);
    const bool adopted = fd >= 0 && proxy_->adoptListener(fd, id).has_value();
    EXPECT_TRUE(adopted) << "the child's listener was not adopted";
    if (adopted) (void)::write(sv[0], "g", 1);
    ::close(sv[0]);  // the child gives up unless it got "g"
    const ssize_t want = static_cast<ssize_t>(count * sizeof(int));
    const bool read_all = adopted && ::read(results[0], r.data(), want) == want;
    ::close(results[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_TRUE(read_all) << "the child's results did not come back";
    return read_all ? r : std::vector<int>{};
  }
};

// The test's own namespace, like the runner will make it: lo, a default route via lo, and
// TCP to anything but loopback redirected to the listener at 127.0.0.1:3128.
TEST_F(TransparentNetnsTest, RedirectedConnectionsAreDecidedByName) {
  const auto [id, synthetic] = identityWithNames();
  ASSERT_FALSE(synthetic.empty());
  const std::uint16_t up = up_.httpPort();
  auto r = probeFromRedirectedNetns(id, 3, [&] {
    return std::vector<int>{
        getFrom(synthetic, up, "anything.test"),                            // by the DNS map
        getFrom("203.0.113.7", up, "upstream.test:" + std::to_string(up)),  // by Host
        getFrom("203.0.113.8", up, "denied.test")};                         // refused: reset
  });
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], 200) << "by the synthetic address's name";
  EXPECT_EQ(r[1], 200) << "by the Host header";
  EXPECT_LT(r[2], 0) << "a denied host gets a reset, not an HTTP answer";
  auto row = sink_->waitConnection([](const auto& e) { return e.host == "denied.test"; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->kind, audit::ConnectionKind::kTransparent);
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
  auto ok = sink_->waitConnection([](const auto& e) {
    return e.host == "upstream.test" && e.decision == audit::Decision::kAllow;
  });
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->kind, audit::ConnectionKind::kTransparent);
}

// Ambiguous spellings over transparent capture: where a rule judges paths (here the deny rule),
// a captured plain-HTTP connection is parsed and judged by the same canonical request, so the
// ambiguous spellings are refused (400) and never reach the upstream, the deny rule denies the
// `;` spelling of its path (403), and only the plain spelling is forwarded.
class TransparentSpellingTest : public TransparentNetnsTest {
 protected:
  std::string policyYaml() override {
    return TransparentNetnsTest::policyYaml() +
           "    - {id: no-admin, action: deny, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       paths: [\"/v1/admin/*\"], paths_case: insensitive}\n";
  }
};

TEST_F(TransparentSpellingTest, AmbiguousSpellingsAreRefusedInACapturedConnection) {
  const auto [id, synthetic] = identityWithNames();
  ASSERT_FALSE(synthetic.empty());
  const std::uint16_t up = up_.httpPort();
  const std::vector<std::pair<std::string, int>> cases = {
      {"/v1/data;x/users", 400},  {"/v1/%C0%AE%C0%AE/x", 400}, {"/v1/%ff", 400},
      {"/admin./x", 400},         {"/admin%20/x", 400},        {"/.../x", 400},
      {"/v1/admin;x/users", 403}, {"/V1/Admin/users", 403},    {"/v1/ok", 200}};
  const std::string host = "upstream.test:" + std::to_string(up);
  auto r = probeFromRedirectedNetns(id, cases.size(), [&] {
    std::vector<int> out;
    for (const auto& c : cases) out.push_back(getFrom(synthetic, up, host, c.first));
    return out;
  });
  ASSERT_EQ(r.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(r[i], cases[i].second) << cases[i].first;
  // Each refusal was recorded, with its reason, before it was answered.
  std::size_t ambiguous = 0;
  for (const auto& e : sink_->requests()) ambiguous += e.reason == "ambiguous_target";
  EXPECT_EQ(ambiguous, 6u);
  std::lock_guard lock(up_.httpLog().mu);
  ASSERT_EQ(up_.httpLog().request_heads.size(), 1u);
  EXPECT_EQ(up_.httpLog().request_heads[0].rfind("GET /v1/ok\n", 0), 0u);
}

// A listener without DNS names is not a sandbox's: a connection DNAT'd to it (a published
// container port, a Kubernetes Service) is a proxy client like any other, not a redirected
// connection to its original destination. The origin-form GET gets the explicit proxy's 400.
TEST_F(TransparentNetnsTest, ListenerWithoutNamesTakesNoConnectionForARedirectedOne) {
  const std::uint16_t up = up_.httpPort();
  auto r = probeFromRedirectedNetns(ListenerIdentity{"exec-dnat", matcher_}, 1, [&] {
    return std::vector<int>{getFrom("203.0.113.7", up, "upstream.test:" + std::to_string(up))};
  });
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], 400) << "answered as a proxy client (origin-form refused), not relayed";
  EXPECT_EQ(up_.httpLog().accepted.load(), 0);
}

// The one admission over transparent capture (the other paths are in admission_test.cpp): of
// two checks that both fail, the earlier one's refusal is the connection's row (the client gets a
// reset). The pairs here need no earlier connection to spend a budget or hold a slot.
enum class Check { kAudit, kDecide, kAsk, kVet, kDial };
struct OrderCase {
  Check first;
  Check second;
  const char* name;
};

class TransparentAdmissionTest : public TransparentNetnsTest,
                                 public ::testing::WithParamInterface<OrderCase> {
 protected:
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: transparent\negress:\n  rules:\n"
           "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"]}\n"
           "    - {id: public, action: allow, hosts: [metadata.test], ports: [\"1-65535\"]}\n"
           "    - {id: blocked, action: deny, hosts: [blocked.test], ports: [\"1-65535\"]}\n"
           "    - {id: gate, action: ask, hosts: [ask.test, askpriv.test], ports: [\"1-65535\"]}\n";
  }
  bool fails(Check c) const { return GetParam().first == c || GetParam().second == c; }
  std::string host() const {
    if (fails(Check::kDecide)) return "blocked.test";
    if (fails(Check::kAsk)) return fails(Check::kVet) ? "askpriv.test" : "ask.test";
    return fails(Check::kVet) ? "metadata.test" : "upstream.test";
  }
  static const char* reason(Check c) {
    switch (c) {
      case Check::kAudit:
        return "audit_unavailable";
      case Check::kDecide:
        return "denied_by_rule";
      case Check::kAsk:
        return "approval_unavailable";
      case Check::kVet:
        return "private_address";
      case Check::kDial:
        return "upstream_error";
    }
    return "";
  }
};

TEST_P(TransparentAdmissionTest, TheEarlierCheckIsTheRow) {
  const auto metadata = *policy::parseIpLiteral("169.254.169.254");
  resolver_->add("blocked.test", {metadata});
  resolver_->add("askpriv.test", {metadata});
  resolver_->add("ask.test", {*policy::parseIpLiteral("127.0.0.1")});
  // A port nothing listens on (bound once, then closed): dialling it is refused.
  net::io_context ioc;
  tcp::acceptor probe(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const std::uint16_t closed = probe.local_endpoint().port();
  probe.close();
  const std::uint16_t port = fails(Check::kDial) ? closed : up_.httpPort();
  const auto [id, synthetic] = identityWithNames();
  if (fails(Check::kAudit)) sink_->setHealthy(false);
  const std::string name = host() + ":" + std::to_string(port);
  auto r = probeFromRedirectedNetns(
      id, 1, [&] { return std::vector<int>{getFrom("203.0.113.9", port, name)}; });
  sink_->setHealthy(true);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_LT(r[0], 0) << "a refused redirected connection gets a reset";
  const std::string h = host();
  auto row = sink_->waitConnection([&](const auto& e) { return e.host == h; });
  ASSERT_TRUE(row);
  EXPECT_EQ(row->kind, audit::ConnectionKind::kTransparent);
  EXPECT_EQ(row->decision, audit::Decision::kDeny);
  EXPECT_EQ(row->reason, reason(GetParam().first));
}

INSTANTIATE_TEST_SUITE_P(
    Transparent, TransparentAdmissionTest,
    ::testing::Values(OrderCase{Check::kAudit, Check::kDecide, "AuditBeforeDecide"},
                      OrderCase{Check::kAudit, Check::kAsk, "AuditBeforeAsk"},
                      OrderCase{Check::kAudit, Check::kVet, "AuditBeforeVet"},
                      OrderCase{Check::kAudit, Check::kDial, "AuditBeforeDial"},
                      OrderCase{Check::kDecide, Check::kVet, "DecideBeforeVet"},
                      OrderCase{Check::kDecide, Check::kDial, "DecideBeforeDial"},
                      OrderCase{Check::kAsk, Check::kVet, "AskBeforeVet"},
                      OrderCase{Check::kAsk, Check::kDial, "AskBeforeDial"},
                      OrderCase{Check::kVet, Check::kDial, "VetBeforeDial"}),
    [](const auto& info) { return std::string(info.param.name); });

// An h2 client over transparent capture: the captured TLS connection goes through the same
// inspection as a CONNECT (client_connection.cpp carry() -> startInspection), so ALPN picks h2
// and the stream is decided and injected like any request. curl runs inside the namespace,
// reaching the synthetic address of upstream.test, which is redirected to the proxy.
class TransparentH2Test : public TransparentNetnsTest {
 protected:
  static constexpr const char* kSecret = "sk-transparent-h2-61c0";

  ProxyOptions options() override {
    auto o = TransparentNetnsTest::options();
    o.ca = ca_;
    o.upstream_ca_files = {ca_file_};
    return o;
  }
  std::string policyYaml() override {
    return "apiVersion: sluice/v1\nkind: Workflow\nname: transparent\negress:\n  rules:\n"
           "    - {id: api, action: allow, hosts: [upstream.test], ports: [\"1-65535\"],\n"
           "       allow_private: true, cidrs: [\"127.0.0.0/8\"], tls: inspect,\n"
           "       methods: [GET], paths: [\"/v1/*\"],\n"
           "       inject: {headers: {Authorization: \"Bearer ${secret:token}\"}}}\n";
  }
  void TearDown() override {
    TransparentNetnsTest::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  tls_testing::TestPki pki_;
  std::string dir_ = [] {
    char tmpl[] = "/tmp/sluice-transparent-h2-XXXXXX";
    return std::string(::mkdtemp(tmpl) ? tmpl : "");
  }();
  std::string ca_file_ = [this] {
    std::ofstream(dir_ + "/upstream-ca.pem") << pki_.caPem();
    return dir_ + "/upstream-ca.pem";
  }();
  std::shared_ptr<CertificateAuthority> ca_ = [this] {
    auto ca = CertificateAuthority::createEphemeral("sluice transparent h2 test CA");
    std::ofstream(dir_ + "/proxy-ca.pem") << (ca ? (*ca)->certificatePem() : "");
    return ca ? *ca : nullptr;
  }();
  tls_testing::HttpsUpstream https_{pki_.leaf({"upstream.test"})};
};

TEST_F(TransparentH2Test, AnH2ClientIsInspectedStreamByStream) {
  auto [id, synthetic] = identityWithNames();
  ASSERT_FALSE(synthetic.empty());
  id.secrets = policy::makeSecretStore({{"token", kSecret}});
  const std::string port = std::to_string(https_.port());
  const std::string out = dir_ + "/curl.out";
  // code * 10 + the HTTP major version curl used, per URL.
  auto r = probeFromRedirectedNetns(id, 2, [&] {
    const std::string cmd =
        "curl --http2 -s --max-time 10 --cacert " + dir_ +
        "/proxy-ca.pem --resolve upstream.test:" + port + ":" + synthetic +
        " -w '%{http_code} %{http_version}\\n' -o /dev/null https://upstream.test:" + port +
        "/v1/ok -o /dev/null https://upstream.test:" + port + "/v2/no > " + out;
    std::vector<int> codes;
    if (std::system(cmd.c_str()) != 0) return std::vector<int>{-1, -1};
    std::ifstream in(out);
    int code = 0;
    int version = 0;
    while (in >> code >> version) codes.push_back(code * 10 + version);
    codes.resize(2, -2);
    return codes;
  });
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], 2002) << "200 over HTTP/2";
  EXPECT_EQ(r[1], 4032) << "403 over HTTP/2 (path_not_allowed)";
  auto got = https_.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, "/v1/ok");
  EXPECT_EQ(got[0].header("Authorization"), std::string("Bearer ") + kSecret);
  auto denied = sink_->waitRequest([](const auto& e) { return e.path == "/v2/no"; });
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->reason, "path_not_allowed");
  auto conn = sink_->waitConnection([](const auto& e) { return e.host == "upstream.test"; });
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->kind, audit::ConnectionKind::kTransparent);
  EXPECT_EQ(conn->tls, audit::TlsHandling::kInspect);
}

}  // namespace
}  // namespace sluice::proxy::testing
