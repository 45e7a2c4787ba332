// TLS inspection and credential injection end to end: the real `sluice run` (and `sluice proxy`)
// against a local HTTPS upstream whose certificate comes from a test CA made here with the
// openssl CLI. The upstream reports SHA-256 digests of the credential headers it received,
// never the headers themselves, so nothing it sends back can carry the secret. The program in
// the sandbox (curl and Python's urllib) tries the allowed and the refused requests, then dumps
// everything it can read into /output; the test searches all of it, the receipt, sluice's own
// output and the audit database's bytes for the secret.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "https_upstream.hpp"
#include "isolation.hpp"
#include "proc_scan.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using sluice::testing::Outcome;
using sluice::testing::slurp;

std::string sha256Hex(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += k[md[i] >> 4];
    out += k[md[i] & 15];
  }
  return out;
}

bool toolsPresent(std::string* missing) {
  for (const char* t : {"/usr/bin/openssl", "/usr/bin/curl", "/usr/bin/python3"})
    if (::access(t, X_OK) != 0) {
      *missing = t;
      return false;
    }
  return true;
}

#define REQUIRE_TOOLS()                                                         \
  do {                                                                          \
    std::string missing_;                                                       \
    if (!toolsPresent(&missing_)) {                                             \
      if (isolationRequired()) FAIL() << "required tool missing: " << missing_; \
      GTEST_SKIP() << "tool missing: " << missing_;                             \
    }                                                                           \
  } while (0)

// The test upstream: HTTPS on 127.0.0.1 (and ::1 when the host has IPv6 loopback) at one port,
// answering every request with JSON describing it. Credential headers appear only as SHA-256
// digests. Each request is also appended to a log file, for "never reached the upstream" checks.
constexpr const char* kUpstreamPy = R"PY(
import hashlib, http.server, json, os, socket, ssl, sys, threading
cert, key, portfile, logfile = sys.argv[1:5]
lock = threading.Lock()

def digest(v):
    return None if v is None else hashlib.sha256(v.encode("latin-1")).hexdigest()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        rec = {"method": self.command, "path": self.path, "host": self.headers.get("Host"),
               "authorization_sha256": digest(self.headers.get("Authorization")),
               "x_api_key_sha256": digest(self.headers.get("X-Api-Key")),
               "header_names": sorted(k.lower() for k in self.headers.keys())}
        body = (json.dumps(rec) + "\n").encode()
        with lock:
            with open(logfile, "a") as f:
                f.write(json.dumps(rec) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = answer
    def log_message(self, *args):
        pass

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    def get_request(self):
        conn, addr = self.socket.accept()
        conn.settimeout(30)
        return conn, addr

class Server6(Server):
    address_family = socket.AF_INET6

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
servers = [Server(("127.0.0.1", 0), Handler)]
port = servers[0].server_address[1]
try:
    servers.append(Server6(("::1", port), Handler))
except OSError:
    pass
for s in servers:
    s.socket = ctx.wrap_socket(s.socket, server_side=True, do_handshake_on_connect=False)
# The handshake runs in the request thread (setup), so a stalled client blocks nobody.
orig_setup = Handler.setup
def setup(self):
    self.request.do_handshake()
    orig_setup(self)
Handler.setup = setup
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
with open(portfile + ".tmp", "w") as f:
    f.write(str(port))
os.rename(portfile + ".tmp", portfile)
servers[0].serve_forever()
)PY";

// The program run in the sandbox. Results go to /output/results.json; every response body and
// header block to /output/responses; everything readable to /output/dump.
constexpr const char* kAgentPy = R"PY(
import json, os, socket, ssl, subprocess, sys, urllib.request, urllib.error
port = os.environ["UPSTREAM_PORT"]
mode = sys.argv[1]
token = os.environ.get("API_TOKEN", "")
results = {"env": {k: os.environ.get(k) for k in
    ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT",
     "GIT_SSL_CAINFO", "AWS_CA_BUNDLE", "HTTPS_PROXY"]},
    "api_token_present": bool(token)}
os.makedirs("/output/responses", exist_ok=True)
os.makedirs("/output/dump", exist_ok=True)

def curl(name, url, *args):
    body, hdrs = f"/output/responses/{name}.body", f"/output/responses/{name}.headers"
    try:
        p = subprocess.run(["curl", "-sS", "--max-time", "20", "-o", body, "-D", hdrs,
                            "-w", "%{http_code} %{http_connect}", *args, url],
                           capture_output=True, timeout=40)
        code, connect = (p.stdout.decode().split() + ["0", "0"])[:2]
        r = {"status": int(code), "connect": int(connect), "exit": p.returncode,
             "stderr": p.stderr.decode(errors="replace")}
    except Exception as e:
        r = {"status": 0, "error": repr(e)}
    try:
        r["body"] = open(body, errors="replace").read()
    except OSError:
        r["body"] = ""
    results[name] = r

def py(name, url, method="GET", headers=None, data=None):
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    r = {}
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            r["status"], raw, h = resp.status, resp.read(), str(resp.headers)
    except urllib.error.HTTPError as e:
        r["status"], raw, h = e.code, e.read(), str(e.headers)
    except Exception as e:
        r["status"], raw, h = 0, repr(e).encode(), ""
    open(f"/output/responses/{name}.body", "wb").write(raw)
    open(f"/output/responses/{name}.headers", "w").write(h)
    r["body"] = raw.decode(errors="replace")
    results[name] = r

def sni_mismatch(name):
    # CONNECT to the upstream, then a TLS ClientHello naming another host.
    r = {}
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
        s.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        r["connect"] = head.split(b"\r\n")[0].decode(errors="replace")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        t = ctx.wrap_socket(s, server_hostname="evil.example")
        t.sendall(f"GET /echo/sni HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n".encode())
        raw = b""
        while len(raw) < 65536:
            chunk = t.recv(4096)
            if not chunk:
                break
            raw += chunk
        r["response"] = raw.decode(errors="replace")
        r["status_line"] = r["response"].split("\r\n")[0]
    except Exception as e:
        r["error"] = repr(e)
    open(f"/output/responses/{name}.txt", "w").write(json.dumps(r))
    results[name] = r

def raw_connect(name):
    # The CONNECT response itself (curl and urllib do not show its body).
    r = {}
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
        s.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        raw = b""
        while len(raw) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            raw += chunk
            head, sep, body = raw.partition(b"\r\n\r\n")
            if sep:
                n = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        n = int(v)
                if len(body) >= n:
                    break
        head, _, body = raw.partition(b"\r\n\r\n")
        r["status_line"] = head.split(b"\r\n")[0].decode(errors="replace")
        r["status"] = int(r["status_line"].split()[1]) if r["status_line"] else 0
        r["head"] = head.decode(errors="replace")
        r["body"] = body.decode(errors="replace")
    except Exception as e:
        r["error"] = repr(e)
    open(f"/output/responses/{name}.txt", "w").write(json.dumps(r))
    results[name] = r

base = f"https://localhost:{port}"
if mode == "full":
    curl("curl_allowed", f"{base}/echo/curl", "-H", "Authorization: Bearer client-supplied",
         "-H", f"X-Api-Key: {token}")
    curl("curl_post", f"{base}/echo/curl-post", "-X", "POST", "--data", "x=1")
    curl("curl_path", f"{base}/private/curl")
    curl("curl_host_mismatch", f"{base}/echo/host-mismatch", "-H", "Host: evil.example")
    curl("curl_other_host", f"https://127.0.0.1:{port}/echo/other-host", "-H", f"X-Api-Key: {token}")
    py("py_allowed", f"{base}/echo/urllib",
       headers={"Authorization": "Bearer client-supplied", "X-Api-Key": token})
    py("py_post", f"{base}/echo/urllib-post", method="POST", data=b"x=1")
    py("py_path", f"{base}/private/urllib")
    sni_mismatch("sni_mismatch")
else:
    curl("curl_untrusted", f"{base}/echo/untrusted")
    py("py_untrusted", f"{base}/echo/untrusted-urllib")
    raw_connect("raw_connect_untrusted")

# Everything the program can read: its environment (both views), /proc/1, and every regular
# file under /etc, /work, /tmp.
def dump(name, data):
    with open(f"/output/dump/{name}", "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
dump("os.environ", json.dumps(dict(os.environ)))
for p in ["/proc/self/environ", "/proc/self/cmdline", "/proc/1/environ", "/proc/1/cmdline",
          "/proc/1/maps"]:
    try:
        dump(p.replace("/", "_"), open(p, "rb").read())
    except OSError as e:
        dump(p.replace("/", "_") + ".error", repr(e))
files = 0
for root in ["/etc", "/work", "/tmp"]:
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            try:
                if os.path.isfile(p) and not os.path.islink(p):
                    dump("file" + p.replace("/", "_"), open(p, "rb").read())
                    files += 1
            except OSError:
                pass
results["dumped_files"] = files
with open("/output/results.json", "w") as f:
    json.dump(results, f, indent=1)
)PY";

class TlsRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-tls-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "policies");
    fs::create_directories(dir_ / "out");
    secret_ = "sk-sluice-TLSWIRE-" + sluice::testing::randomText(32);
    std::ofstream(dir_ / "agent.py") << kAgentPy;
    std::ofstream(dir_ / "upstream.py") << kUpstreamPy;
  }
  void TearDown() override {
    stopUpstream();
    // SLUICE_TEST_KEEP=1 leaves the directory (results, responses, dumps, audit db) to look at.
    if (const char* keep = std::getenv("SLUICE_TEST_KEEP"); !keep || std::string(keep) != "1")
      fs::remove_all(dir_);
  }

  // Runs `sh -c cmd`, true on exit 0 (output in dir_/sh.log).
  bool sh(const std::string& cmd) {
    const std::string full = "(" + cmd + ") >>" + (dir_ / "sh.log").string() + " 2>&1";
    return std::system(full.c_str()) == 0;
  }

  // A test CA and a server certificate for localhost / 127.0.0.1 / ::1 signed by it.
  void makeCertificates() {
    const std::string failed = sluice::testing::makeUpstreamCertificates(dir_);
    ASSERT_EQ(failed, "") << slurp(dir_ / "certs.log");
  }

  void startUpstream() {
    makeCertificates();
    if (HasFatalFailure()) return;
    const fs::path portfile = dir_ / "upstream.port";
    upstream_ = sluice::testing::startPythonUpstream(
        dir_,
        {(dir_ / "upstream.py").string(), (dir_ / "server.pem").string(),
         (dir_ / "server.key").string(), portfile.string(), (dir_ / "upstream.log").string()},
        portfile, port_);
    ASSERT_GT(upstream_, 0);
    ASSERT_FALSE(port_.empty()) << "upstream did not start: " << slurp(dir_ / "upstream.stderr");
  }
  void stopUpstream() {
    if (upstream_ <= 0) return;
    ::kill(upstream_, SIGTERM);
    int st = 0;
    ::waitpid(upstream_, &st, 0);
    upstream_ = -1;
  }

  void writePolicy() {
    std::ofstream(dir_ / "policies" / "tlswire.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: tlswire\n"
           "description: TLS inspection integration test\n"
           "sandbox:\n  timeout: 90s\n  cpu_time: 60s\n  memory: 512MiB\n  pids: 64\n"
           "  output: 1MiB\n  disk: 64MiB\n  network: proxy\n"
           "egress:\n  rules:\n"
           "    - id: echo-api\n      action: allow\n      hosts: [localhost]\n"
           "      ports: ["
        << port_
        << "]\n      allow_private: true\n"
           "      cidrs: [\"127.0.0.0/8\", \"::1/128\"]\n      tls: inspect\n"
           "      methods: [GET]\n      paths: [\"/echo*\"]\n"
           "      inject:\n        headers:\n"
           "          Authorization: \"Bearer ${secret:api_token}\"\n"
           "        placeholder_env: API_TOKEN\n"
           "    - id: loopback-literal\n      action: allow\n      cidrs: [\"127.0.0.0/8\"]\n"
           "      allow_private: true\n      ports: ["
        << port_
        << "]\n      tls: inspect\n"
           "      methods: [GET]\n      paths: [\"/echo*\"]\n";
  }

  void writeSecrets(const std::string& content, mode_t mode = 0600) {
    const fs::path p = dir_ / "secrets.yaml";
    std::ofstream(p) << content;
    ::chmod(p.c_str(), mode);
  }
  std::string secretsYaml() const {
    return "api_token:\n  value: \"" + secret_ + "\"\nunused_other:\n  value: \"" + secret_ +
           "-unused\"\n";
  }

  Outcome sluice(const std::vector<std::string>& args, const char* log_level = nullptr) {
    std::vector<std::string> env;
    if (log_level) env.push_back(std::string("SLUICE_LOG_LEVEL=") + log_level);
    return sluice::testing::runBinary(SLUICE_BINARY, dir_, args, env);
  }

  // `sluice run` of the agent in `mode` ("full" or "untrusted").
  Outcome runAgent(const std::string& mode, bool upstream_ca,
                   const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {"run",
                                  "--workflow",
                                  "tlswire",
                                  "--policy-dir",
                                  (dir_ / "policies").string(),
                                  "--audit",
                                  db().string(),
                                  "--secrets",
                                  (dir_ / "secrets.yaml").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    if (upstream_ca) a.insert(a.end(), {"--upstream-ca", (dir_ / "ca.pem").string()});
    a.insert(a.end(), {"--env", "UPSTREAM_PORT=" + port_, "--input",
                       (dir_ / "agent.py").string() + ":agent.py", "--output-dir",
                       (dir_ / "out").string(), "--receipt", (dir_ / "receipt.json").string(),
                       "--json", "--", "python3", "/input/agent.py", mode});
    // Every component's debug log on stderr, which the leak search covers.
    return sluice(a, "debug");
  }

  json results() {
    json j = json::parse(slurp(dir_ / "out" / "results.json"), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "no results.json";
    return j.is_discarded() ? json::object() : j;
  }

  // Paths (under /echo*) the upstream actually received.
  std::vector<std::string> upstreamPaths() {
    std::vector<std::string> out;
    std::ifstream in(dir_ / "upstream.log");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) out.push_back(j.value("path", ""));
    }
    return out;
  }

  // Every byte the secret could have leaked into on the host side (whereFound: the sandbox's
  // /output, the receipt, sluice's stdout/stderr, the audit database and its WAL/SHM files),
  // once the agent's dump and the audit store are there to search. Returns where it was found.
  std::vector<std::string> secretLocations(const Outcome& o) {
    std::size_t files = 0, db_files = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "out"))
      files += e.is_regular_file() ? 1 : 0;
    EXPECT_GT(files, 10u) << "the agent dumped too little to be a meaningful search";
    for (const auto& e : fs::directory_iterator(dir_))
      db_files += e.path().filename().string().starts_with("audit.db") ? 1 : 0;
    EXPECT_GE(db_files, 1u);
    return sluice::testing::whereFound({secret_}, o, dir_);
  }
  void expectSecretNowhere(const Outcome& o) {
    for (const auto& where : secretLocations(o)) ADD_FAILURE() << "secret found in " << where;
  }

  // Rows of `sql` (every column as text), from the audit database.
  std::vector<std::vector<std::string>> query(const std::string& sql) {
    std::vector<std::vector<std::string>> rows;
    sqlite3* db = nullptr;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_open_v2(this->db().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK ||
        sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
      sqlite3_close(db);
      return rows;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* t = sqlite3_column_text(st, i);
        row.push_back(t ? reinterpret_cast<const char*>(t) : "");
      }
      rows.push_back(std::move(row));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
  }

  struct RequestRow {
    std::string method, host, path, decision, rule_id, reason, injected;
    int status = 0;
  };
  std::vector<RequestRow> requestRows() {
    std::vector<RequestRow> rows;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(this->db().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open audit db";
      sqlite3_close(db);
      return rows;
    }
    sqlite3_stmt* st = nullptr;
    const char* q =
        "SELECT coalesce(method,''), coalesce(host,''), coalesce(path,''), status, decision, "
        "coalesce(rule_id,''), coalesce(reason,''), injected_secrets FROM requests ORDER BY seq";
    if (sqlite3_prepare_v2(db, q, -1, &st, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "query requests: " << sqlite3_errmsg(db);
      sqlite3_close(db);
      return rows;
    }
    auto col = [&](int i) {
      const unsigned char* t = sqlite3_column_text(st, i);
      return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
    };
    while (sqlite3_step(st) == SQLITE_ROW) {
      RequestRow r;
      r.method = col(0);
      r.host = col(1);
      r.path = col(2);
      r.status = sqlite3_column_int(st, 3);
      r.decision = col(4);
      r.rule_id = col(5);
      r.reason = col(6);
      r.injected = col(7);
      rows.push_back(std::move(r));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
  }

  fs::path db() const { return dir_ / "audit.db"; }
  fs::path dir_;
  std::string secret_;
  std::string port_;
  pid_t upstream_ = -1;
};

// A refusal body from the proxy: {"error","workflow","rule","reason","detail"}.
json refusal(const json& r) {
  json j = json::parse(r.value("body", std::string()), nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

std::string show(const json& j) { return j.dump(1); }

TEST_F(TlsRun, InspectedRequestsGetTheSecretWhichNeverReachesTheSandbox) {
  REQUIRE_SANDBOX();
  REQUIRE_TOOLS();
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicy();
  writeSecrets(secretsYaml());
  Outcome o = runAgent("full", true);
  ASSERT_EQ(o.status, 0) << o.err << "\n"
                         << o.out << "\nupstream: " << slurp(dir_ / "upstream.stderr");
  json r = results();
  const std::string auth_hash = sha256Hex("Bearer " + secret_);
  const std::string key_hash = sha256Hex(secret_);

  // The CA variables point at the bundle; the placeholder is there and is not the secret.
  for (const char* k : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                        "NODE_EXTRA_CA_CERTS", "PIP_CERT", "GIT_SSL_CAINFO", "AWS_CA_BUNDLE"})
    EXPECT_EQ(r["env"][k], "/etc/ssl/certs/ca-certificates.crt") << k;
  EXPECT_EQ(r["api_token_present"], true);

  // Allowed GETs, curl and urllib: the injected Authorization replaced the client's, and the
  // placeholder in X-Api-Key was swapped for the secret.
  for (const char* name : {"curl_allowed", "py_allowed"}) {
    const json& c = r[name];
    ASSERT_EQ(c.value("status", 0), 200) << name << ": " << show(c);
    json echo = json::parse(c.value("body", std::string()), nullptr, false);
    ASSERT_FALSE(echo.is_discarded()) << name << ": " << show(c);
    EXPECT_EQ(echo["authorization_sha256"], auth_hash)
        << name << ": expected the injected 'Bearer <secret>', not the client's ("
        << sha256Hex("Bearer client-supplied") << ")";
    EXPECT_EQ(echo["x_api_key_sha256"], key_hash) << name << ": placeholder not swapped";
  }

  // Denied method and path: 403 inside the tunnel, with the reason.
  for (const char* name : {"curl_post", "py_post"}) {
    const json& c = r[name];
    EXPECT_EQ(c.value("status", 0), 403) << name << ": " << show(c);
    EXPECT_EQ(refusal(c).value("reason", ""), "method_not_allowed") << name << ": " << show(c);
  }
  for (const char* name : {"curl_path", "py_path"}) {
    const json& c = r[name];
    EXPECT_EQ(c.value("status", 0), 403) << name << ": " << show(c);
    EXPECT_EQ(refusal(c).value("reason", ""), "path_not_allowed") << name << ": " << show(c);
  }

  // Host header naming another host than the CONNECT target: refused, never forwarded.
  {
    const json& c = r["curl_host_mismatch"];
    EXPECT_NE(c.value("status", 0), 200) << show(c);
    EXPECT_EQ(refusal(c).value("reason", ""), "host_mismatch") << show(c);
  }
  // SNI naming another host: the handshake or the request is refused.
  {
    const json& c = r["sni_mismatch"];
    const std::string line = c.value("status_line", "");
    EXPECT_TRUE(c.contains("error") || (!line.empty() && line.find(" 200 ") == std::string::npos))
        << show(c);
  }
  // The placeholder sent to another destination (127.0.0.1, rule loopback-literal) is refused:
  // the request never leaves.
  {
    const json& c = r["curl_other_host"];
    EXPECT_EQ(c.value("status", 0), 403) << show(c);
    EXPECT_EQ(refusal(c).value("reason", ""), "placeholder_leak") << show(c);
  }

  // What reached the upstream: the allowed requests only.
  const auto paths = upstreamPaths();
  auto reached = [&](const std::string& p) {
    return std::find(paths.begin(), paths.end(), p) != paths.end();
  };
  EXPECT_TRUE(reached("/echo/curl"));
  EXPECT_TRUE(reached("/echo/urllib"));
  for (const char* p : {"/echo/curl-post", "/echo/urllib-post", "/private/curl", "/private/urllib",
                        "/echo/host-mismatch", "/echo/sni", "/echo/other-host"})
    EXPECT_FALSE(reached(p)) << p << " reached the upstream";

  // Audit rows: the secret's name on the injected requests, the denials with their reasons,
  // the leak attempt flagged.
  bool saw_injected = false, saw_post = false, saw_path = false, saw_leak = false;
  std::string all;
  for (const auto& row : requestRows()) {
    all += row.method + " " + row.host + " " + row.path + " " + std::to_string(row.status) + " " +
           row.decision + " " + row.rule_id + " " + row.reason + " " + row.injected + "\n";
    if (row.path == "/echo/curl" && row.status == 200 && row.rule_id == "echo-api" &&
        row.injected.find("\"api_token\"") != std::string::npos)
      saw_injected = true;
    if (row.path == "/echo/curl-post" && row.decision == "deny" && row.status == 403 &&
        row.reason == "method_not_allowed")
      saw_post = true;
    if (row.path == "/private/curl" && row.decision == "deny" && row.status == 403) saw_path = true;
    if (row.path == "/echo/other-host" && row.decision == "deny" && row.status == 403 &&
        row.reason == "placeholder_leak")
      saw_leak = true;
  }
  EXPECT_TRUE(saw_injected) << "no requests row for /echo/curl naming api_token:\n" << all;
  EXPECT_TRUE(saw_post) << all;
  EXPECT_TRUE(saw_path) << all;
  EXPECT_TRUE(saw_leak) << "placeholder sent to another destination not audited as a leak:\n"
                        << all;

  EXPECT_GT(r.value("dumped_files", 0), 5);
  // The dump is what the search below relies on: it must hold the environment (with the
  // placeholder) and the CA bundle the sandbox trusted, whose last certificate is this
  // execution's CA, after the host's own bundle.
  const fs::path dump = dir_ / "out" / "dump";
  EXPECT_NE(slurp(dump / "_proc_self_environ").find("API_TOKEN="), std::string::npos);
  const std::string bundle = slurp(dump / "file_etc_ssl_certs_ca-certificates.crt");
  const std::string host_bundle = slurp("/etc/ssl/certs/ca-certificates.crt");
  EXPECT_TRUE(bundle.starts_with(host_bundle)) << "the sandbox bundle lost the system CAs";
  const auto last = bundle.rfind("-----BEGIN CERTIFICATE-----");
  ASSERT_NE(last, std::string::npos);
  std::ofstream(dir_ / "last.pem") << bundle.substr(last);
  ASSERT_TRUE(sh("openssl x509 -noout -subject -in " + (dir_ / "last.pem").string() + " > " +
                 (dir_ / "last.subject").string()));
  EXPECT_NE(slurp(dir_ / "last.subject").find("sluice execution CA ex-"), std::string::npos)
      << slurp(dir_ / "last.subject");

  expectSecretNowhere(o);
}

TEST_F(TlsRun, UntrustedUpstreamCertificateGives502WithTheReason) {
  REQUIRE_SANDBOX();
  REQUIRE_TOOLS();
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicy();
  writeSecrets(secretsYaml());
  Outcome o = runAgent("untrusted", false);  // no --upstream-ca: the test CA is unknown
  ASSERT_EQ(o.status, 0) << o.err << "\n" << o.out;
  json r = results();
  // The proxy may refuse at the CONNECT (it verifies the upstream before answering) or inside
  // the tunnel; either way the client sees 502.
  {
    const json& c = r["curl_untrusted"];
    EXPECT_TRUE(c.value("status", 0) == 502 || c.value("connect", 0) == 502) << show(c);
    const json& p = r["py_untrusted"];
    EXPECT_TRUE(p.value("status", 0) == 502 || p.value("body", "").find("502") != std::string::npos)
        << show(p);
  }
  // The reason, from the raw CONNECT (or, if the tunnel was accepted, curl's body).
  {
    const json& raw = r["raw_connect_untrusted"];
    const json& c = r["curl_untrusted"];
    json why = raw.value("status", 0) == 502 ? refusal(raw) : refusal(c);
    EXPECT_EQ(why.value("reason", ""), "upstream_tls") << show(raw) << "\n" << show(c);
    EXPECT_NE(why.value("detail", "").find("certificate"), std::string::npos) << show(raw) << "\n"
                                                                              << show(c);
    std::cout << "[ info ] untrusted upstream refusal: " << why.dump() << "\n";
  }
  for (const auto& p : upstreamPaths()) EXPECT_NE(p, "/echo/untrusted") << "request forwarded";
  // Audited: a connection (or request) to the upstream that failed TLS, as a failure of the
  // network (decision fail), not a denial.
  auto rows = query(
      "SELECT 'connection', decision, reason, coalesce(detail,'') FROM connections "
      "WHERE decision = 'fail' AND reason = 'tls_failed' UNION ALL "
      "SELECT 'request', decision, reason, '' FROM requests "
      "WHERE decision = 'fail' AND reason = 'tls_failed'");
  EXPECT_FALSE(rows.empty()) << "the refused upstream is not in the audit store";
  expectSecretNowhere(o);
}

// Control for the leak search: a secret deliberately handed to the sandbox is found.
TEST_F(TlsRun, LeakSearchFindsAPlantedSecret) {
  REQUIRE_SANDBOX();
  REQUIRE_TOOLS();
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicy();
  writeSecrets(secretsYaml());
  Outcome o = runAgent("untrusted", false, {"--env", "PLANTED=" + secret_});
  ASSERT_EQ(o.status, 0) << o.err;
  bool in_dump = false;
  for (const auto& where : secretLocations(o))
    in_dump = in_dump || where.find("/dump/") != std::string::npos;
  EXPECT_TRUE(in_dump) << "the search of /output/dump does not see the sandbox's environment";
}

// The sandbox's pid 1 is a clone of sluice that never execs: it must not carry a copy of the
// secret store (the program cannot read init's memory today, but a copy there is one kernel
// or seccomp gap away from the code the secret is kept from). Scans init's memory from the host.
TEST_F(TlsRun, SandboxInitHoldsNoCopyOfTheSecret) {
  REQUIRE_SANDBOX();
  REQUIRE_TOOLS();
  port_ = "8443";
  writePolicy();
  writeSecrets(secretsYaml());
  const fs::path err = dir_ / "stderr";
  pid_t run = ::fork();
  if (run == 0) {
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 1);
    ::dup2(e, 2);
    ::execl(SLUICE_BINARY, SLUICE_BINARY, "run", "--workflow", "tlswire", "--policy-dir",
            (dir_ / "policies").c_str(), "--audit", "", "--secrets",
            (dir_ / "secrets.yaml").c_str(), "--", "sleep", "3", static_cast<char*>(nullptr));
    ::_exit(99);
  }
  ASSERT_GT(run, 0);
  // Find the run's init: a child of that sluice named sluice-init (bounded wait).
  auto inits = sluice::testing::waitForChildrenNamed(run, "sluice-init", std::chrono::seconds(5));
  const pid_t init = inits.empty() ? -1 : inits.front();
  sluice::testing::MemoryScan scan;
  if (init > 0) scan = sluice::testing::scanMemory(init, secret_);
  int st = 0;
  ::waitpid(run, &st, 0);
  ASSERT_GT(init, 0) << "no sluice-init child found: " << slurp(err);
  EXPECT_GT(scan.scanned, 0u);
  for (const auto& h : scan.hits)
    ADD_FAILURE() << "the sandbox's init (pid " << init << ") holds the secret in mapping: " << h;
}

// Start-up refusals: no sandbox needed, sluice stops before it makes one.
TEST_F(TlsRun, MissingOrUnsafeSecretsRefuseToStart) {
  REQUIRE_TOOLS();
  port_ = "8443";
  writePolicy();
  std::vector<std::string> base = {
      "run", "--workflow", "tlswire", "--policy-dir", (dir_ / "policies").string(), "--audit", ""};
  // No --secrets at all. (Secrets are read after the sandbox's init exists, so that it holds
  // no copy; the program must still never start.)
  {
    auto a = base;
    a.insert(a.end(), {"--", "/bin/sh", "-c", "echo PROGRAM-RAN"});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << o.err;
    EXPECT_NE(o.err.find("api_token"), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find("PROGRAM-RAN"), std::string::npos) << o.out;
  }
  // A store that lacks the name: refused, naming it, never printing a value.
  writeSecrets("something_else:\n  value: \"" + secret_ + "\"\n");
  {
    auto a = base;
    a.insert(a.end(), {"--secrets", (dir_ / "secrets.yaml").string(), "--", "/bin/sh", "-c",
                       "echo PROGRAM-RAN"});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << o.err;
    EXPECT_NE(o.err.find("api_token"), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find("PROGRAM-RAN"), std::string::npos) << o.out;
    EXPECT_EQ(o.err.find(secret_), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find(secret_), std::string::npos) << o.out;
  }
  // With an audit store and --json: the refused run is still an execution, exit 125, its
  // receipt on stdout naming the failed step, and its row in the store.
  {
    const std::string db = (dir_ / "refused.db").string();
    std::vector<std::string> a = {
        "run",     "--workflow", "tlswire", "--policy-dir",    (dir_ / "policies").string(),
        "--audit", db,           "--json",  "--secrets",       (dir_ / "secrets.yaml").string(),
        "--",      "/bin/sh",    "-c",      "echo PROGRAM-RAN"};
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << o.err;
    auto receipt = nlohmann::json::parse(o.out, nullptr, false);
    ASSERT_FALSE(receipt.is_discarded()) << o.out;
    EXPECT_EQ(receipt["exit"]["code"], 125);
    EXPECT_EQ(receipt["exit"]["status"], 125);
    EXPECT_NE(receipt["stderr"]["text"].get<std::string>().find("step 'secrets'"),
              std::string::npos)
        << receipt.dump();
    EXPECT_EQ(receipt["stdout"]["text"], "");
    EXPECT_TRUE(receipt["hash"].is_string());
    EXPECT_EQ(o.out.find(secret_), std::string::npos);
    Outcome q = sluice({"audit", "sql", "--db", db, "SELECT exit_code FROM executions"});
    EXPECT_EQ(q.status, 0) << q.err;
    EXPECT_NE(q.out.find("125"), std::string::npos) << q.out;
  }
  // A store readable by others.
  writeSecrets(secretsYaml(), 0644);
  {
    auto a = base;
    a.insert(a.end(), {"--secrets", (dir_ / "secrets.yaml").string(), "--", "true"});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << o.err;
    EXPECT_EQ(o.err.find(secret_), std::string::npos) << o.err;
  }
  // The placeholder variable cannot also be given with --env.
  writeSecrets(secretsYaml());
  {
    auto a = base;
    a.insert(a.end(), {"--secrets", (dir_ / "secrets.yaml").string(), "--env", "API_TOKEN=mine",
                       "--", "true"});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << o.err;
    EXPECT_NE(o.err.find("API_TOKEN"), std::string::npos) << o.err;
  }
  // An --upstream-ca that does not exist.
  {
    auto a = base;
    a.insert(a.end(), {"--secrets", (dir_ / "secrets.yaml").string(), "--upstream-ca",
                       (dir_ / "no-such-ca.pem").string(), "--", "true"});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << o.err;
    EXPECT_NE(o.err.find("no-such-ca.pem"), std::string::npos) << o.err;
  }
}

TEST_F(TlsRun, StandaloneProxyRefusesWhatItCannotServe) {
  REQUIRE_TOOLS();
  port_ = "8443";
  writePolicy();
  std::vector<std::string> base = {"proxy",    "--policy-dir", (dir_ / "policies").string(),
                                   "--listen", "127.0.0.1:0",  "--workflow",
                                   "tlswire"};
  writeSecrets(secretsYaml());
  // tls: inspect without --ca-dir.
  {
    auto a = base;
    a.insert(a.end(), {"--secrets", (dir_ / "secrets.yaml").string()});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 1) << o.err;
    EXPECT_NE(o.err.find("--ca-dir"), std::string::npos) << o.err;
  }
  // A CA directory that does not hold a CA.
  {
    auto a = base;
    a.insert(a.end(), {"--secrets", (dir_ / "secrets.yaml").string(), "--ca-dir",
                       (dir_ / "no-ca").string()});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 1) << o.err;
  }
  Outcome init = sluice({"ca", "init", "--dir", (dir_ / "ca").string()});
  ASSERT_EQ(init.status, 0) << init.err;
  // Secrets missing, then a store without the name.
  {
    auto a = base;
    a.insert(a.end(), {"--ca-dir", (dir_ / "ca").string()});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 1) << o.err;
    EXPECT_NE(o.err.find("api_token"), std::string::npos) << o.err;
  }
  writeSecrets("something_else:\n  value: \"" + secret_ + "\"\n");
  {
    auto a = base;
    a.insert(a.end(),
             {"--ca-dir", (dir_ / "ca").string(), "--secrets", (dir_ / "secrets.yaml").string()});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 1) << o.err;
    EXPECT_NE(o.err.find("api_token"), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find(secret_), std::string::npos) << o.err;
  }
}

// A free loopback port for `sluice proxy --listen` (bind port 0, read it, release it).
std::string freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return "";
  }
  ::close(fd);
  return std::to_string(ntohs(a.sin_port));
}

bool canConnect(const std::string& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

TEST_F(TlsRun, StandaloneProxyInspectsAndInjects) {
  REQUIRE_TOOLS();
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicy();
  writeSecrets(secretsYaml());
  Outcome init = sluice({"ca", "init", "--dir", (dir_ / "ca").string()});
  ASSERT_EQ(init.status, 0) << init.err;
  const std::string listen = freePort();
  ASSERT_FALSE(listen.empty());
  pid_t px = ::fork();
  if (px == 0) {
    int log = ::open((dir_ / "proxy.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execl(SLUICE_BINARY, SLUICE_BINARY, "proxy", "--policy-dir", (dir_ / "policies").c_str(),
            "--listen", ("127.0.0.1:" + listen).c_str(), "--workflow", "tlswire", "--audit",
            db().c_str(), "--ca-dir", (dir_ / "ca").c_str(), "--secrets",
            (dir_ / "secrets.yaml").c_str(), "--upstream-ca", (dir_ / "ca.pem").c_str(),
            "--threads", "1", static_cast<char*>(nullptr));
    ::_exit(99);
  }
  ASSERT_GT(px, 0);
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = canConnect(listen);
    if (!up) std::this_thread::sleep_for(50ms);
  }
  auto fetch = [&](const std::string& path) {
    const fs::path out = dir_ / "standalone.body";
    fs::remove(out);
    sh("curl -sS --max-time 20 --noproxy '' -x http://127.0.0.1:" + listen + " --cacert " +
       (dir_ / "ca" / "ca.pem").string() + " -H 'Authorization: Bearer client-supplied' -o " +
       out.string() + " https://localhost:" + port_ + path);
    return slurp(out);
  };
  std::string body, after_reload;
  bool reload_rejected = false;
  if (up) {
    body = fetch("/echo/standalone");
    // A reload whose policy needs a secret the store lacks is rejected; the old policy stays.
    const std::string good = slurp(dir_ / "policies" / "tlswire.yaml");
    std::string bad = good;
    bad.replace(bad.find("${secret:api_token}"), 19, "${secret:not_in_store}");
    std::ofstream(dir_ / "policies" / "tlswire.yaml") << bad;
    ::kill(px, SIGHUP);
    for (int i = 0; i < 200 && !reload_rejected; ++i) {
      reload_rejected = slurp(dir_ / "proxy.log").find("not_in_store") != std::string::npos;
      if (!reload_rejected) std::this_thread::sleep_for(50ms);
    }
    after_reload = fetch("/echo/after-reload");
  }
  ::kill(px, SIGTERM);
  int st = 0;
  ::waitpid(px, &st, 0);
  ASSERT_TRUE(up) << "sluice proxy did not listen: " << slurp(dir_ / "proxy.log");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(dir_ / "proxy.log");
  json echo = json::parse(body, nullptr, false);
  ASSERT_FALSE(echo.is_discarded()) << body << "\n"
                                    << slurp(dir_ / "sh.log") << "\n"
                                    << slurp(dir_ / "proxy.log");
  EXPECT_EQ(echo["authorization_sha256"], sha256Hex("Bearer " + secret_));
  EXPECT_TRUE(reload_rejected) << "reload naming a missing secret not refused: "
                               << slurp(dir_ / "proxy.log");
  json again = json::parse(after_reload, nullptr, false);
  ASSERT_FALSE(again.is_discarded()) << after_reload << "\n" << slurp(dir_ / "proxy.log");
  EXPECT_EQ(again["authorization_sha256"], sha256Hex("Bearer " + secret_))
      << "the policy in force changed after a rejected reload";
  EXPECT_EQ(slurp(dir_ / "proxy.log").find(secret_), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().starts_with("audit.db")) {
      EXPECT_EQ(slurp(e.path()).find(secret_), std::string::npos) << e.path();
    }
  }
}

// One story about a run: the summary line, the receipt, `audit query` and the refusal lines
// count the same attempts, and a closed port is a failure of the network, not a denial.
TEST_F(TlsRun, EverySurfaceCountsTheSameAttemptsAndFailuresAreNotDenials) {
  REQUIRE_SANDBOX();
  REQUIRE_TOOLS();
  startUpstream();
  if (HasFatalFailure()) return;
  writePolicy();
  const std::string closed = freePort();  // nothing listens there
  ASSERT_FALSE(closed.empty());
  std::ofstream(dir_ / "policies" / "tlswire.yaml", std::ios::app)
      << "    - id: closed-port\n      action: allow\n      hosts: [localhost]\n"
         "      ports: ["
      << closed << "]\n      allow_private: true\n      cidrs: [\"127.0.0.0/8\", \"::1/128\"]\n";
  writeSecrets(secretsYaml());
  const std::string base = "https://localhost:" + port_;
  const std::string script = "for u in " + base + "/echo/a " + base + "/echo/b " + base +
                             "/other https://evil.example/ https://localhost:" + closed +
                             "/; do curl -s -o /dev/null $u; done; true";
  Outcome o = sluice({"run", "--workflow", "tlswire", "--policy-dir", (dir_ / "policies").string(),
                      "--audit", db().string(), "--secrets", (dir_ / "secrets.yaml").string(),
                      "--upstream-ca", (dir_ / "ca.pem").string(), "--receipt",
                      (dir_ / "receipt.json").string(), "--", "/bin/sh", "-c", script});
  ASSERT_EQ(o.status, 0) << o.err;
  json receipt = json::parse(slurp(dir_ / "receipt.json"));
  const json& net = receipt["network"];
  // Two requests allowed; a request (path) and a CONNECT (host) denied; a closed port failed.
  EXPECT_EQ(net["allowed"], 2) << net.dump(1);
  EXPECT_EQ(net["denied"], 2) << net.dump(1);
  EXPECT_EQ(net["failed"], 1) << net.dump(1);
  EXPECT_EQ(net["requests"], 3) << net.dump(1);
  EXPECT_EQ(net["connections"], 5) << net.dump(1);
  ASSERT_EQ(net["failures"].size(), 1u) << net.dump(1);
  EXPECT_EQ(net["failures"][0]["reason"], "connect_refused");
  EXPECT_EQ(net["failures"][0]["rule"], "closed-port");
  EXPECT_EQ(net["failures"][0]["port"], std::stoi(closed));
  for (const auto& d : net["denials"]) EXPECT_NE(d["reason"], "upstream_error") << d.dump();
  // The summary line says the same.
  EXPECT_NE(o.err.find("network: 2 allowed, 2 denied, 1 failed (5 connections, 3 requests"),
            std::string::npos)
      << o.err;
  // A request refused inside the inspected tunnel is named with its method and path, and the
  // explain command asks about that request.
  EXPECT_NE(o.err.find("sluice: denied GET localhost:" + port_ + "/other - path_not_allowed"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("--url https://localhost:" + port_ + "/other --method GET"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("sluice: denied CONNECT evil.example:443 - no_matching_rule"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("sluice: failed CONNECT localhost:" + closed + " - connect_refused"),
            std::string::npos)
      << o.err;
  // `audit query` counts the execution's attempts the same way.
  Outcome q = sluice({"audit", "query", "--db", db().string(), "--execution",
                      receipt["execution_id"].get<std::string>(), "--format", "json"});
  ASSERT_EQ(q.status, 0) << q.err;
  json rows = json::parse(q.out);
  ASSERT_EQ(rows.size(), 1u) << q.out;
  EXPECT_EQ(rows[0]["allowed"], 2) << q.out;
  EXPECT_EQ(rows[0]["denied"], 2) << q.out;
  EXPECT_EQ(rows[0]["failed"], 1) << q.out;
  // The failed connection's row says fail, with what failed.
  Outcome f =
      sluice({"audit", "query", "--db", db().string(), "--decision", "fail", "--format", "json"});
  ASSERT_EQ(f.status, 0) << f.err;
  json failed = json::parse(f.out);
  ASSERT_EQ(failed.size(), 1u) << f.out;
  EXPECT_EQ(failed[0]["reason"], "connect_refused") << f.out;
}

}  // namespace
