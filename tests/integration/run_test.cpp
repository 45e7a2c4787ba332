// `sluice run` end to end: the real binary, a policy written by the test, and checks a user
// would make — what the program could (not) reach, what the receipt and exit status say, and
// that nothing is left running or mounted afterwards.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "isolation.hpp"
#include "proc_scan.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using sluice::testing::Outcome;
using sluice::testing::slurp;

class SluiceRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-it-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "policies");
    writePolicy("sandboxed", "none", "20s", "10s", "256MiB", "64", "1MiB", "64MiB");
    writePolicy("proxied", "proxy", "20s", "10s", "256MiB", "64", "1MiB", "64MiB");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void writePolicy(const std::string& name, const std::string& network, const std::string& timeout,
                   const std::string& cpu, const std::string& mem, const std::string& pids,
                   const std::string& output, const std::string& disk) {
    std::ofstream(dir_ / "policies" / (name + ".yaml"))
        << "apiVersion: sluice/v1\nkind: Workflow\nname: " << name
        << "\ndescription: integration test\nsandbox:\n  timeout: " << timeout
        << "\n  cpu_time: " << cpu << "\n  memory: " << mem << "\n  pids: " << pids
        << "\n  output: " << output << "\n  disk: " << disk << "\n  network: " << network
        << "\negress:\n  rules:\n    - id: only-example\n      action: allow\n      hosts: "
           "[\"allowed.example\"]\n      ports: [443]\n";
  }

  // Runs sluice with `args`; `as_uid` >= 0: as that uid/gid (an unprivileged caller).
  Outcome sluice(const std::vector<std::string>& args,
                 const std::vector<std::string>& extra_env = {}, int as_uid = -1) {
    return sluice::testing::runBinary(SLUICE_BINARY, dir_, args, extra_env, as_uid);
  }

  std::vector<std::string> runArgs(const std::string& workflow, std::vector<std::string> opts,
                                   std::vector<std::string> cmd) {
    std::vector<std::string> a = {
        "run",     "--workflow", workflow, "--policy-dir", (dir_ / "policies").string(),
        "--audit", db().string()};
    a.insert(a.end(), opts.begin(), opts.end());
    a.push_back("--");
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
  }

  // `sluice run --json`: the status and the parsed receipt.
  std::pair<int, json> runJson(const std::string& workflow, std::vector<std::string> opts,
                               std::vector<std::string> cmd) {
    opts.push_back("--json");
    Outcome o = sluice(runArgs(workflow, opts, cmd));
    json j = json::parse(o.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout: " << o.out << "\nstderr: " << o.err;
    return {o.status, j};
  }

  fs::path db() const { return dir_ / "audit.db"; }
  fs::path dir_;
};

bool jsonschemaAvailable() {
  return std::system("python3 -c 'import jsonschema' 2>/dev/null") == 0;
}

TEST_F(SluiceRun, ReceiptMatchesSchemaAndIsAudited) {
  REQUIRE_SANDBOX();
  auto [status, receipt] =
      runJson("sandboxed", {"--receipt", (dir_ / "r.json").string()},
              {"/bin/sh", "-c", "echo hello; echo oops >&2; echo data > /output/o.txt"});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(receipt["stdout"]["text"], "hello\n");
  EXPECT_EQ(receipt["stderr"]["text"], "oops\n");
  EXPECT_EQ(receipt["workflow"], "sandboxed");
  EXPECT_EQ(receipt["artifacts"].size(), 1u);
  EXPECT_TRUE(receipt["hash"].is_string());
  EXPECT_EQ(json::parse(slurp(dir_ / "r.json"))["execution_id"], receipt["execution_id"]);
  if (!jsonschemaAvailable()) {
    if (isolationRequired()) FAIL() << "python3-jsonschema missing";
    GTEST_SKIP() << "python3-jsonschema missing";
  }
  const std::string cmd =
      "python3 -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
      "json.load(open(sys.argv[2])))' " +
      (dir_ / "r.json").string() + " " SLUICE_SOURCE_DIR "/schemas/receipt.v1.schema.json";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  Outcome v = sluice({"audit", "verify", "--db", db().string()});
  EXPECT_EQ(v.status, 0) << v.out << v.err;
}

// An argument that is not UTF-8 (any byte string is a valid argv) is run as given and recorded
// with U+FFFD in the receipt and the audit row: writing the receipt once aborted sluice
// (nlohmann's dump throws on invalid UTF-8) after the program had already run.
TEST_F(SluiceRun, AnArgumentThatIsNotUtf8IsRunAndRecorded) {
  REQUIRE_SANDBOX();
  auto [status, receipt] = runJson("sandboxed", {}, {"/bin/echo", "a\xff\xfez"});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(receipt["stdout"]["text"], "a\uFFFD\uFFFDz\n");
  ASSERT_EQ(receipt["argv"].size(), 2u);
  EXPECT_EQ(receipt["argv"][1], "a\uFFFD\uFFFDz");
  EXPECT_TRUE(receipt["hash"].is_string());
  Outcome v = sluice({"audit", "verify", "--db", db().string()});
  EXPECT_EQ(v.status, 0) << v.out << v.err;
}

// Everything after `--` is the command, whatever option comes right before it: each repeatable
// option (CLI11 let it swallow the `--` and then parsed the command's -c as sluice's).
TEST_F(SluiceRun, DashDashEndsOptionsAfterEveryRepeatableOption) {
  REQUIRE_SANDBOX();
  fs::create_directories(dir_ / "in");
  std::ofstream(dir_ / "in" / "f.txt") << "x";
  const std::string ca = (dir_ / "ca.pem").string();
  ASSERT_EQ(std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                         "-nodes -subj /CN=t -days 1 -keyout " +
                         (dir_ / "ca.key").string() + " -out " + ca + " 2>/dev/null")
                            .c_str()),
            0);
  const std::vector<std::vector<std::string>> lasts = {{"--env", "FOO=1"},
                                                       {"--input", (dir_ / "in").string()},
                                                       {"--upstream-ca", ca},
                                                       {"--env", "FOO=1", "--env", "BAR=2"}};
  for (const auto& last : lasts) {
    SCOPED_TRACE(last[0]);
    auto a =
        runArgs("proxied", last, {"/bin/sh", "-c", "echo hi; echo --env -x \"$FOO\"", "--", "-c"});
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 0) << o.err;
    EXPECT_NE(o.out.find("hi\n--env -x"), std::string::npos) << o.out << o.err;
  }
  // Nothing after `--`: the command is missing (usage error, exit 2).
  Outcome none = sluice({"run", "--workflow", "sandboxed", "--policy-dir",
                         (dir_ / "policies").string(), "--audit", "", "--env", "A=1", "--"});
  EXPECT_EQ(none.status, 2) << none.out << none.err;
}

TEST_F(SluiceRun, DefaultModePassesOutputThroughAndSummarises) {
  REQUIRE_SANDBOX();
  Outcome o = sluice(runArgs("sandboxed", {}, {"/bin/sh", "-c", "echo visible; exit 7"}));
  EXPECT_EQ(o.status, 7);
  EXPECT_EQ(o.out, "visible\n");
  EXPECT_NE(o.err.find("exit 7"), std::string::npos) << o.err;
}

// A client behind a passthrough tunnel sees only "CONNECT tunnel failed, response 403": the
// run's stderr says, once per distinct refusal, what was denied, why, the nearest rule, and
// the `policy explain` command that reproduces it (which then says the same).
TEST_F(SluiceRun, EachDistinctRefusalIsExplainedOnStderr) {
  REQUIRE_SANDBOX();
  Outcome o = sluice(runArgs(
      "proxied", {},
      {"/bin/sh", "-c",
       "for u in https://evil.example/ https://evil.example/ https://allowed.example:8443/; do "
       "curl -s -o /dev/null $u; done; true"}));
  EXPECT_EQ(o.status, 0) << o.err;
  const std::string explain = "  reproduce: sluice policy explain --policy " +
                              (dir_ / "policies" / "proxied.yaml").string() + " --connect ";
  EXPECT_NE(o.err.find("sluice: denied CONNECT evil.example:443 - no_matching_rule\n" + explain +
                       "evil.example:443\n"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("sluice: denied CONNECT allowed.example:8443 - port_not_allowed (rule "
                       "only-example); nearest miss: rule only-example matched host "
                       "allowed.example but port 8443 is not in [443]\n" +
                       explain + "allowed.example:8443\n"),
            std::string::npos)
      << o.err;
  // Twice the same refusal is one line.
  const auto first = o.err.find("denied CONNECT evil.example:443");
  EXPECT_EQ(o.err.find("denied CONNECT evil.example:443", first + 1), std::string::npos) << o.err;
  Outcome again =
      sluice({"policy", "explain", "--policy", (dir_ / "policies" / "proxied.yaml").string(),
              "--connect", "allowed.example:8443"});
  EXPECT_NE(again.out.find("reason:       port_not_allowed"), std::string::npos) << again.out;
}

TEST_F(SluiceRun, ExitStatusPaths) {
  REQUIRE_SANDBOX();
  EXPECT_EQ(sluice(runArgs("sandboxed", {}, {"/bin/sh", "-c", "exit 3"})).status, 3);
  EXPECT_EQ(sluice(runArgs("sandboxed", {}, {"/bin/sh", "-c", "kill -KILL $$"})).status, 137);
  Outcome nf = sluice(runArgs("sandboxed", {}, {"definitely-not-a-command"}));
  EXPECT_EQ(nf.status, 127);
  EXPECT_NE(nf.err.find("definitely-not-a-command"), std::string::npos) << nf.err;
  EXPECT_EQ(sluice(runArgs("sandboxed", {}, {"/etc/passwd"})).status, 126);
  // A command that cannot start still gets a receipt (and an audit row).
  auto [nf_status, nf_receipt] = runJson("sandboxed", {}, {"definitely-not-a-command"});
  EXPECT_EQ(nf_status, 127);
  EXPECT_EQ(nf_receipt["exit"]["code"], 127);
  EXPECT_TRUE(nf_receipt["hash"].is_string());
  EXPECT_EQ(sluice(runArgs("sandboxed", {"--timeout", "1s"}, {"sleep", "30"})).status, 124);
  Outcome loose = sluice(runArgs("sandboxed", {"--memory", "4GiB"}, {"true"}));
  EXPECT_EQ(loose.status, 125);
  EXPECT_NE(loose.err.find("only tighten"), std::string::npos) << loose.err;
  Outcome bad_wf = sluice(runArgs("no-such-workflow", {}, {"true"}));
  EXPECT_EQ(bad_wf.status, 125);
  Outcome setup = sluice(runArgs("sandboxed", {"--input", "/nonexistent-input"}, {"true"}));
  EXPECT_EQ(setup.status, 125);
  EXPECT_NE(setup.err.find("input"), std::string::npos) << setup.err;
}

TEST_F(SluiceRun, AnAuditStoreThatCannotOpenStopsTheProgramFromStarting) {
  // The store opens on its own thread while the sandbox is built; the program must still never
  // run unaudited: nothing it does (here: create a marker through --output-dir) may happen.
  REQUIRE_SANDBOX();
  for (const std::string network : {"sandboxed", "proxied"}) {
    const fs::path bad_db = dir_ / "no-such-dir" / "audit.db";
    const fs::path out_dir = dir_ / ("out-" + network);
    std::vector<std::string> a = {"run",
                                  "--workflow",
                                  network,
                                  "--policy-dir",
                                  (dir_ / "policies").string(),
                                  "--audit",
                                  bad_db.string(),
                                  "--output-dir",
                                  out_dir.string(),
                                  "--",
                                  "/bin/sh",
                                  "-c",
                                  "echo ran; echo x > /output/ran"};
    Outcome o = sluice(a);
    EXPECT_EQ(o.status, 125) << network << ": " << o.err;
    EXPECT_EQ(o.out.find("ran"), std::string::npos) << network << ": " << o.out;
    EXPECT_NE(o.err.find("audit store"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(bad_db.string()), std::string::npos) << o.err;
    EXPECT_FALSE(fs::exists(out_dir / "ran")) << network;
  }
  // Nothing left behind by the aborted runs.
  Outcome gc = sluice({"gc"});
  EXPECT_EQ(gc.status, 0) << gc.out << gc.err;
  EXPECT_NE(gc.out.find("nothing to collect"), std::string::npos) << gc.out;
}

// Everything a sandboxed program might try, each printing ESCAPED if it worked.
constexpr const char* kEscapeBattery = R"PY(
import ctypes, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
host_port = int(sys.argv[1])
def attempt(name, f):
    try:
        r = f()
        if r is False or (isinstance(r, int) and not isinstance(r, bool) and r < 0):
            print("blocked", name)
        else:
            print("ESCAPED", name)
    except Exception as e:
        print("blocked", name, type(e).__name__)
def tcp(host, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect((host, port))
    if host in ("127.0.0.1", "::1"): return True
    # With network: proxy, TCP to any other address is captured by sluice's proxy (transparent
    # capture): reaching it is no escape; an answer that is not sluice's refusal would be.
    s.sendall(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
    data = s.recv(4096)
    return (bool(data) and b"X-Sluice-Reason" not in data) or False
def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
    s.sendto(b"x", (host, port)); s.recv(10); return True
attempt("tcp public", lambda: tcp("1.1.1.1", 443))
attempt("tcp private", lambda: tcp("10.0.0.1", 80))
attempt("tcp metadata", lambda: tcp("169.254.169.254", 80))
attempt("tcp host loopback service", lambda: tcp("127.0.0.1", host_port))
attempt("tcp ipv6", lambda: tcp("2606:4700:4700::1111", 443, socket.AF_INET6))
attempt("tcp ipv6 loopback service", lambda: tcp("::1", host_port, socket.AF_INET6))
attempt("udp dns", lambda: udp("8.8.8.8", 53))
attempt("dns lookup", lambda: socket.getaddrinfo("example.com", 443))
attempt("raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
attempt("packet socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
attempt("netlink socket", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("route change", lambda: subprocess.run(["ip", "route", "add", "default", "dev", "lo"], capture_output=True).returncode == 0 or False)
attempt("address change", lambda: subprocess.run(["ip", "addr", "add", "10.9.9.9/24", "dev", "lo"], capture_output=True).returncode == 0 or False)
attempt("unshare user ns", lambda: libc.unshare(0x10000000))
attempt("unshare net ns", lambda: libc.unshare(0x40000000))
attempt("mount tmpfs", lambda: libc.mount(b"none", b"/work", b"tmpfs", 0, None))
attempt("ptrace parent", lambda: libc.ptrace(16, os.getppid(), None, None))
attempt("ptrace init", lambda: libc.ptrace(16, 1, None, None))
attempt("read /etc/shadow", lambda: open("/etc/shadow").read())
attempt("read host root", lambda: os.listdir("/root"))
attempt("read host home", lambda: os.listdir("/home"))
attempt("read host /var", lambda: sorted(os.listdir("/var")) != ["cache", "tmp"] or False)
attempt("read host /var/lib", lambda: os.listdir("/var/lib"))
attempt("host env", lambda: os.environ["SLUICE_IT_HOST_SECRET"])
attempt("init environ", lambda: open("/proc/1/environ").read())
attempt("write /etc", lambda: open("/etc/evil", "w").write("x"))
attempt("write /usr", lambda: open("/usr/evil", "w").write("x"))
attempt("write /", lambda: open("/evil", "w").write("x"))
attempt("write /input", lambda: open("/input/evil", "w").write("x"))
attempt("setuid root", lambda: os.setuid(0))
attempt("chroot", lambda: libc.chroot(b"/tmp"))
attempt("kernel log", lambda: libc.klogctl(3, ctypes.create_string_buffer(64), 64))
attempt("bpf", lambda: libc.syscall(321, 0, None, 0))
attempt("keyctl", lambda: libc.syscall(250, 0, 0, 0, 0, 0))
print("battery done")
)PY";

TEST_F(SluiceRun, EscapeBattery) {
  REQUIRE_SANDBOX();
  // A service on the host's loopback (IPv4 and IPv6) that the sandbox must not reach.
  int srv = ::socket(AF_INET6, SOCK_STREAM, 0);
  int zero = 0;
  ::setsockopt(srv, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(srv, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin6_port));
  std::ofstream(dir_ / "battery.py") << kEscapeBattery;
  fs::create_directories(dir_ / "in");
  for (const char* wf : {"sandboxed", "proxied"}) {
    Outcome o = sluice(runArgs(wf,
                               {"--input", (dir_ / "battery.py").string() + ":battery.py",
                                "--input", (dir_ / "in").string() + ":in", "--json"},
                               {"python3", "/input/battery.py", port}),
                       {"SLUICE_IT_HOST_SECRET=topsecret"});
    json j = json::parse(o.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << o.out << o.err;
    const std::string text = j["stdout"]["text"];
    EXPECT_NE(text.find("battery done"), std::string::npos) << wf << "\n"
                                                            << text << j["stderr"]["text"];
    EXPECT_EQ(text.find("ESCAPED"), std::string::npos) << wf << "\n" << text;
    EXPECT_EQ(text.find("topsecret"), std::string::npos);
    EXPECT_EQ(j["exit"]["code"], 0);
  }
  pollfd p{srv, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the host's loopback service was reached";
  ::close(srv);
}

TEST_F(SluiceRun, UnprivilegedCallerGetsAUserNamespaceSandbox) {
  REQUIRE_SANDBOX();  // root, to play the unprivileged caller with setuid
  std::ofstream(dir_ / "battery.py") << kEscapeBattery;
  fs::permissions(dir_, fs::perms::all);
  for (const auto& e : fs::recursive_directory_iterator(dir_))
    fs::permissions(e.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  Outcome o = sluice({"run", "--policy", (dir_ / "policies" / "sandboxed.yaml").string(), "--audit",
                      "", "--json", "--input", (dir_ / "battery.py").string() + ":battery.py", "--",
                      "python3", "/input/battery.py", "1"},
                     {}, 65534);
  if (o.status == 98 || o.status == 99 ||
      o.err.find("user namespaces are unavailable") != std::string::npos) {
    if (isolationRequired()) FAIL() << "unprivileged user namespaces unavailable: " << o.err;
    GTEST_SKIP() << "cannot run sluice unprivileged here: " << o.err;
  }
  json j = json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.status << " " << o.out << o.err;
  EXPECT_NE(o.err.find("not root"), std::string::npos) << o.err;  // says what is not enforced
  EXPECT_EQ(j["isolation"]["cgroup"], "none");
  EXPECT_NE(j["isolation"]["namespaces"].dump().find("user"), std::string::npos);
  const std::string text = j["stdout"]["text"];
  EXPECT_NE(text.find("battery done"), std::string::npos) << text << j["stderr"]["text"];
  EXPECT_EQ(text.find("ESCAPED"), std::string::npos) << text;
  EXPECT_EQ(j["exit"]["status"], 0);
}

TEST_F(SluiceRun, EachLimitIsNamedInTheReceipt) {
  REQUIRE_SANDBOX();
  struct Case {
    const char* limit;
    std::vector<std::string> opts;
    std::vector<std::string> cmd;
    int status;
  };
  const std::vector<Case> cases = {
      {"timeout", {"--timeout", "1s"}, {"sleep", "60"}, 124},
      {"cpu", {"--cpu-time", "1s"}, {"/bin/sh", "-c", "while :; do :; done"}, 124},
      {"memory",
       {"--memory", "64MiB"},
       {"python3", "-c", "a=[]\nwhile True: a.append(bytearray(8<<20))"},
       124},
      {"pids",
       {"--pids", "12"},
       {"python3", "-c",
        "import os,sys,time\nfor i in range(100):\n  try: p=os.fork()\n  except OSError: "
        "sys.exit(1)\n  "
        "if p==0: time.sleep(30); os._exit(0)"},
       124},
      {"disk",
       {"--disk", "4MiB"},
       {"/bin/sh", "-c",
        "for i in $(seq 64); do head -c 1048576 /dev/zero > /tmp/f$i || exit 1; done"},
       124},
      {"file_size",
       {"--file-size", "1MiB"},
       {"dd", "if=/dev/zero", "of=/work/f", "bs=1M", "count=4"},
       124},
      {"output", {"--output", "1KiB"}, {"/bin/sh", "-c", "yes | head -c 100000"}, 0},
  };
  for (const Case& c : cases) {
    auto [status, j] = runJson("sandboxed", c.opts, c.cmd);
    EXPECT_EQ(j["limit_hit"], c.limit) << j.dump(1);
    EXPECT_EQ(status, c.status) << c.limit;
    EXPECT_EQ(j["exit"]["status"], c.status) << c.limit;
  }
}

TEST_F(SluiceRun, SigkillOfSluiceTakesTheSandboxWithIt) {
  REQUIRE_SANDBOX();
  const std::string marker = "4242" + std::to_string(::getpid());
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    auto args = runArgs("sandboxed", {},
                        {"/bin/sh", "-c", "setsid sleep " + marker + " & sleep " + marker});
    std::vector<char*> argv{const_cast<char*>(SLUICE_BINARY)};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(SLUICE_BINARY, argv.data());
    ::_exit(99);
  }
  auto running = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::string cmd = slurp(e.path() / "cmdline");
      if (cmd.starts_with(std::string("sleep\0", 6) + marker)) ++n;
    }
    return n;
  };
  for (int i = 0; i < 100 && running() < 2; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(running(), 2);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  for (int i = 0; i < 100 && running() > 0; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(running(), 0);
  // Its cgroups are left behind (nobody could remove them); gc does, and knows they are dead.
  Outcome gc = sluice({"gc"});
  EXPECT_EQ(gc.status, 0) << gc.err;
  for (const std::string& name : sluice::testing::sluiceCgroupNames())
    EXPECT_FALSE(name.starts_with(std::to_string(pid) + ".")) << name;
}

TEST_F(SluiceRun, SigtermStopsTheRunCleanly) {
  REQUIRE_SANDBOX();
  const fs::path out = dir_ / "term.out";
  pid_t pid = ::fork();
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(o, 2);
    auto args = runArgs("sandboxed", {}, {"/bin/sh", "-c", "echo ready; sleep 60"});
    std::vector<char*> argv{const_cast<char*>(SLUICE_BINARY)};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(SLUICE_BINARY, argv.data());
    ::_exit(99);
  }
  for (int i = 0; i < 100 && slurp(out).find("ready") == std::string::npos; ++i)
    std::this_thread::sleep_for(50ms);
  ::kill(pid, SIGTERM);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 143) << slurp(out);
}

// The receipt is reported only once its commit is durable; a sluice killed right after it
// printed the receipt (while it closes the store) has it in the store all the same.
TEST_F(SluiceRun, SigkillRightAfterTheReceiptKeepsItInTheStore) {
  REQUIRE_SANDBOX();
  for (int i = 0; i < 5; ++i) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 1);
      auto args = runArgs("sandboxed", {"--json"}, {"/bin/true"});
      std::vector<char*> argv{const_cast<char*>(SLUICE_BINARY)};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(SLUICE_BINARY, argv.data());
      ::_exit(99);
    }
    ::close(fds[1]);
    // The receipt is one line on stdout: kill at its newline, before sluice can exit.
    std::string out;
    char c = 0;
    while (::read(fds[0], &c, 1) == 1) {
      out += c;
      if (c == '\n') break;
    }
    ::kill(pid, SIGKILL);
    ::close(fds[0]);
    ::waitpid(pid, nullptr, 0);
    json receipt = json::parse(out, nullptr, false);
    ASSERT_FALSE(receipt.is_discarded()) << out;
    const std::string id = receipt["execution_id"].get<std::string>();
    Outcome q = sluice({"audit", "sql", "--db", db().string(),
                        "SELECT id FROM executions WHERE id = '" + id + "'"});
    EXPECT_EQ(q.status, 0) << q.err;
    EXPECT_NE(q.out.find(id), std::string::npos) << id << " is not in the store: " << q.out;
  }
  Outcome v = sluice({"audit", "verify", "--db", db().string()});
  EXPECT_EQ(v.status, 0) << v.out << v.err;
}

}  // namespace
