// `sluice serve` admission, against the real binary in its own process (its RSS is its own):
// unauthenticated clients announcing huge bodies cost it no memory, a slow header is cut off
// at its deadline, connections are capped per peer, bodies are refused by their announced size
// before they are read, uploads are spooled, and one token holder cannot take the sessions and
// executions another needs (429 + Retry-After, counted in /metrics, which ordinary callers may
// not read). SLUICE_TEST_SERVE_BINARY runs the same cases against another build.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "isolation.hpp"
#include "proc_scan.hpp"
#include "serve_client.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using serve_test::Http;
using serve_test::Response;

namespace {

const std::string kTokenA = "aaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kTokenB = "bbbbbbbbbbbbbbbbbbbbbbbb";
const std::string kTokenWatcher = "wwwwwwwwwwwwwwwwwwwwwwww";
constexpr std::size_t kMiB = 1u << 20;

std::string binary() {
  const char* other = std::getenv("SLUICE_TEST_SERVE_BINARY");
  return other != nullptr ? other : SLUICE_BINARY;
}

// A TCP connection to 127.0.0.1:`port` from the local address `from` (any of 127.0.0.0/8).
int connectFrom(const char* from, std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connectUnix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string request(const std::string& method, const std::string& target, const std::string& token,
                    const std::string& body = "", const std::string& extra = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT")
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + extra + "\r\n" + body;
}

// Everything the daemon sends until it closes, waiting at most `wait` for each read.
std::string readUntilClosed(int fd, std::chrono::seconds wait = std::chrono::seconds(20)) {
  timeval tv{static_cast<time_t>(wait.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

Response parse(const std::string& raw) {
  Response r;
  const auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.size() < 12) return r;
  r.head = raw.substr(0, end + 2);
  r.body = raw.substr(end + 4);
  r.status = std::atoi(raw.c_str() + 9);
  return r;
}

// Sends `text` on `fd` and reads the answer to the end.
Response roundTrip(int fd, const std::string& text) {
  if (fd < 0) return {};
  (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  Response r = parse(readUntilClosed(fd));
  ::close(fd);
  return r;
}

// A /proc/PID/status field in bytes ("VmRSS", "VmHWM").
std::size_t statusBytes(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.starts_with(field + ":")) return std::stoul(line.substr(field.size() + 1)) * 1024;
  return 0;
}

std::string metricValue(const std::string& metrics, const std::string& series) {
  auto at = metrics.find(series + " ");
  if (at == std::string::npos) return "";
  auto start = at + series.size() + 1;
  return metrics.substr(start, metrics.find('\n', start) - start);
}

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = serve_test::freshTestDir("sluice-admission");
    std::ofstream(dir_ / "policies" / "shell.yaml")
        << "apiVersion: sluice/v1\nkind: Workflow\nname: shell\ndescription: plain shell\n"
           "sandbox:\n  timeout: 120s\n  memory: 256MiB\n  disk: 8MiB\n  network: none\n";
    serve_test::writeTokenFile(dir_, std::string("agent-a ") + kTokenA + "\nagent-b " + kTokenB +
                                         " approver\nwatcher " + kTokenWatcher + " metrics\n");
  }
  void TearDown() override {
    if (daemon_ > 0) {
      ::kill(daemon_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 300 && ::waitpid(daemon_, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (::waitpid(daemon_, &status, WNOHANG) == 0) {
        ::kill(daemon_, SIGKILL);
        ::waitpid(daemon_, &status, 0);
      }
    }
    fs::remove_all(dir_);
  }

  // Starts the daemon (Unix socket and TCP on 127.0.0.1, port 0) and learns its port.
  void spawn(const std::vector<std::string>& extra = {}) {
    const std::string log = (dir_ / "daemon.log").string();
    daemon_ = ::fork();
    if (daemon_ == 0) {
      int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, 1);
      ::dup2(out, 2);
      std::vector<std::string> args = {binary(),       "serve",
                                       "--policy-dir", (dir_ / "policies").string(),
                                       "--listen",     "unix:" + socket(),
                                       "--listen",     "127.0.0.1:0",
                                       "--token-file", (dir_ / "tokens").string(),
                                       "--audit",      (dir_ / "audit.db").string(),
                                       "--drain",      "1s"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(args[0].c_str(), argv.data());
      ::_exit(99);
    }
    const std::regex listening(R"(listening on 127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      std::smatch m;
      const std::string text = sluice::testing::slurp(log);
      if (std::regex_search(text, m, listening))
        port_ = static_cast<std::uint16_t>(std::stoi(m[1]));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_NE(port_, 0) << sluice::testing::slurp(log);
  }
  std::string socket() const { return (dir_ / "sluice.sock").string(); }
  Response tcp(const std::string& token, const std::string& method, const std::string& target,
               const std::string& body = "", const char* from = "127.0.0.1") {
    return roundTrip(connectFrom(from, port_), request(method, target, token, body));
  }
  Response local(const std::string& method, const std::string& target, const std::string& body = "",
                 const std::string& extra = "") {
    return roundTrip(connectUnix(socket()), request(method, target, "", body, extra));
  }
  void expectRefusal(const Response& r, int status, const std::string& reason) {
    EXPECT_EQ(r.status, status) << r.head << r.body;
    EXPECT_EQ(r.js().value("reason", ""), reason) << r.body;
    if (status == 429) {
      EXPECT_FALSE(r.header("retry-after").empty()) << r.head;
    }
  }

  fs::path dir_;
  pid_t daemon_ = -1;
  std::uint16_t port_ = 0;
};

// 200 unauthenticated TCP connections from one address, each announcing a 64 MiB body and
// pushing up to 1 MiB of it: the daemon reads each header, answers 401 and closes (or refuses
// the connection over its per-peer cap), so its RSS stays under 100 MiB, and an authenticated
// caller from another address and a Unix caller are served while the connections are held.
TEST_F(AdmissionTest, UnauthenticatedBodiesCostTheDaemonNoMemory) {
  spawn();
  constexpr int kConnections = 200;
  constexpr std::size_t kPush = kMiB;
  const std::string head =
      "POST /v1/runs HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
      "Content-Length: 67108864\r\n\r\n";
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    int fd = connectFrom("127.0.0.1", port_);
    ASSERT_GE(fd, 0) << "connection " << i;
    (void)!::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    fds.push_back(fd);
  }
  // Each pushes its share of the body while the daemon takes it; a connection the daemon closed
  // stops taking bytes. Ends when every push is done, or nothing moved for 2 s.
  std::vector<std::size_t> pushed(fds.size(), 0);
  std::vector<bool> done(fds.size(), false);
  const std::string chunk(64 * 1024, 'x');
  auto last_progress = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - last_progress < std::chrono::seconds(2)) {
    bool all_done = true;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (done[i]) continue;
      all_done = false;
      const ssize_t n = ::send(fds[i], chunk.data(), std::min(chunk.size(), kPush - pushed[i]),
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        pushed[i] += static_cast<std::size_t>(n);
        last_progress = std::chrono::steady_clock::now();
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        done[i] = true;  // closed by the daemon
      }
      if (pushed[i] >= kPush) done[i] = true;
    }
    if (all_done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::size_t total_pushed = 0;
  for (std::size_t p : pushed) total_pushed += p;
  // Callers are served meanwhile: a token from another address, and the Unix socket.
  auto health = tcp(kTokenA, "GET", "/v1/healthz", "", "127.0.0.2");
  EXPECT_EQ(health.status, 200) << health.head << health.body;
  EXPECT_EQ(local("GET", "/v1/workflows").status, 200);
  const std::size_t hwm = statusBytes(daemon_, "VmHWM"), rss = statusBytes(daemon_, "VmRSS");
  std::cout << "daemon VmRSS " << rss / kMiB << " MiB, VmHWM " << hwm / kMiB << " MiB after "
            << kConnections << " unauthenticated 64 MiB connections (" << total_pushed / kMiB
            << " MiB of body pushed)\n";
  EXPECT_GT(hwm, 0u);
  EXPECT_LT(hwm, 100 * kMiB) << "VmHWM " << hwm;
  for (int fd : fds) ::close(fd);
}

// An unauthenticated request is answered 401 as soon as its header is in, and the connection
// closed, though the 64 MiB body it announced never comes.
TEST_F(AdmissionTest, AnUnauthenticatedRequestIs401BeforeItsBody) {
  spawn();
  for (const std::string& token : {std::string(), std::string("not-a-token-at-all-xx")}) {
    int fd = connectFrom("127.0.0.1", port_);
    ASSERT_GE(fd, 0);
    Response r =
        roundTrip(fd, "POST /v1/runs HTTP/1.1\r\nHost: sluice\r\n" +
                          (token.empty() ? "" : "Authorization: Bearer " + token + "\r\n") +
                          "Content-Length: 67108864\r\n\r\n");
    expectRefusal(r, 401, "unauthorized");
  }
}

// A body larger than its endpoint takes is 413 from its announced length, before it is sent:
// small JSON endpoints take 64 KiB, an upload its session's disk limit. An upload within the
// limit is spooled and lands whole.
TEST_F(AdmissionTest, BodiesAreLimitedPerEndpointAndUploadsSpooled) {
  REQUIRE_SANDBOX();
  spawn();
  auto announce = [&](const std::string& method, const std::string& target, std::size_t bytes) {
    return roundTrip(connectUnix(socket()), method + " " + target +
                                                " HTTP/1.1\r\nHost: sluice\r\nContent-Length: " +
                                                std::to_string(bytes) + "\r\n\r\n");
  };
  expectRefusal(announce("POST", "/v1/sessions", kMiB), 413, "payload_too_large");
  // A caller that sends a body too large without waiting for an answer still reads why: the
  // daemon drops what it sends for a moment rather than resetting the connection.
  expectRefusal(tcp(kTokenA, "POST", "/v1/sessions", std::string(512 * 1024, ' ')), 413,
                "payload_too_large");
  auto created = local("POST", "/v1/sessions", R"({"workflow":"shell"})");
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = created.js()["id"];
  expectRefusal(announce("PUT", "/v1/sessions/" + id + "/files/work/big.bin", 9 * kMiB), 413,
                "payload_too_large");
  expectRefusal(announce("PUT", "/v1/sessions/se-nope/files/work/a", 10), 404, "not_found");
  std::string content(5 * kMiB, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>('a' + i % 23);
  std::ofstream(dir_ / "upload.bin", std::ios::binary) << content;
  auto [rc, sum] = sluice::testing::shellOutput("sha256sum " + (dir_ / "upload.bin").string());
  ASSERT_EQ(rc, 0);
  auto put = local("PUT", "/v1/sessions/" + id + "/files/work/big.bin", content);
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(put.js()["bytes"], content.size());
  EXPECT_EQ(put.js()["sha256"], sum.substr(0, 64));
  auto back = local("GET", "/v1/sessions/" + id + "/files/work/big.bin");
  EXPECT_EQ(back.body.size(), content.size());
  EXPECT_TRUE(back.body == content);
  // Chunked uploads (curl -T -): counted as they arrive, refused once past the disk limit.
  const std::string curl = "curl -sS --unix-socket " + socket() +
                           " -T - http://sluice/v1/sessions/" + id + "/files/work/";
  auto [ok_rc, ok] = sluice::testing::shellOutput("head -c 3145728 /dev/zero | " + curl + "c.bin");
  EXPECT_EQ(ok_rc, 0) << ok;
  EXPECT_EQ(json::parse(ok, nullptr, false).value("bytes", 0), 3145728) << ok;
  auto [big_rc, big] =
      sluice::testing::shellOutput("head -c 9437184 /dev/zero | " + curl + "d.bin");
  EXPECT_EQ(json::parse(big, nullptr, false).value("reason", ""), "payload_too_large") << big;
}

// Slowloris: connections that send their header a byte at a time hold at most their peer's
// share of connections, and only until the header deadline; another address is served
// meanwhile, and the peer itself once they are cut off.
TEST_F(AdmissionTest, ASlowHeaderIsCutOffAndAPeerHoldsOnlyItsShare) {
  spawn({"--header-timeout", "1s", "--max-connections-per-peer", "4"});
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    int fd = connectFrom("127.0.0.1", port_);
    ASSERT_GE(fd, 0);
    (void)!::send(fd, "GET /v1/healthz HTTP/1.1\r\nX-Slow: ", 34, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all four accepted
  expectRefusal(tcp(kTokenA, "GET", "/v1/healthz"), 429, "too_many_connections_from_peer");
  EXPECT_EQ(tcp(kTokenA, "GET", "/v1/healthz", "", "127.0.0.2").status, 200);
  // A byte every 100 ms: the header never completes; the daemon cuts each off.
  std::vector<bool> cut(slow.size(), false);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up &&
         std::find(cut.begin(), cut.end(), false) != cut.end()) {
    for (std::size_t i = 0; i < slow.size(); ++i) {
      if (cut[i]) continue;
      char c;
      const ssize_t peek = ::recv(slow[i], &c, 1, MSG_DONTWAIT);
      if (peek == 0 || ::send(slow[i], "a", 1, MSG_NOSIGNAL) < 0 ||
          (peek < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
        cut[i] = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (std::size_t i = 0; i < slow.size(); ++i) EXPECT_TRUE(cut[i]) << "slow connection " << i;
  for (int fd : slow) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(tcp(kTokenA, "GET", "/v1/healthz").status, 200);
  auto metrics = tcp(kTokenWatcher, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200) << metrics.body;
  EXPECT_EQ(metricValue(metrics.body,
                        "sluice_api_refusals_total{reason=\"too_many_connections_from_peer\"}"),
            "1")
      << metrics.body;
}

// Past --max-connections, a new connection is answered 503 with Retry-After at accept, whoever
// it comes from; once one closes, the next is served.
TEST_F(AdmissionTest, ConnectionsPastTheTotalAre503AtAccept) {
  spawn({"--max-connections", "2", "--max-connections-per-peer", "2"});
  int first = connectFrom("127.0.0.1", port_), second = connectFrom("127.0.0.2", port_);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both accepted
  auto refused = tcp(kTokenA, "GET", "/v1/healthz", "", "127.0.0.3");
  expectRefusal(refused, 503, "too_many_connections");
  EXPECT_FALSE(refused.header("retry-after").empty()) << refused.head;
  ::close(first);  // the daemon sees it go, and its slot with it
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = tcp(kTokenA, "GET", "/v1/healthz", "", "127.0.0.3").status;
  }
  EXPECT_EQ(status, 200);
  ::close(second);
}

// One token holder asks for a session of 100000h, opens sessions past its share and starts
// executions past its share: each is refused (400 for the TTL, 429 + Retry-After for the
// shares), the other caller still gets a session and a run, and the refusals are counted in
// /metrics, which the greedy caller may not read (root, approvers and `metrics` tokens may).
TEST_F(AdmissionTest, OneCallerCannotStarveAnother) {
  REQUIRE_SANDBOX();
  spawn({"--max-sessions", "4", "--max-runs", "4"});
  const std::string session = R"({"workflow":"shell"})";
  auto greedy = tcp(kTokenA, "POST", "/v1/sessions", R"({"workflow":"shell","ttl":"100000h"})");
  EXPECT_EQ(greedy.status, 400) << greedy.body;
  EXPECT_NE(greedy.body.find("--max-session-ttl"), std::string::npos) << greedy.body;
  // Four callers are known (three tokens and the socket's owner): a share is half of each total.
  for (int i = 0; i < 2; ++i) ASSERT_EQ(tcp(kTokenA, "POST", "/v1/sessions", session).status, 201);
  expectRefusal(tcp(kTokenA, "POST", "/v1/sessions", session), 429, "too_many_sessions_for_caller");
  EXPECT_EQ(tcp(kTokenB, "POST", "/v1/sessions", session).status, 201);
  // Two long executions of A's, held open by their streams.
  std::vector<Http> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(Http::tcp(port_));
    streams.back().send(
        "POST", "/v1/runs",
        R"({"workflow":"shell","argv":["/bin/sh","-c","echo started; sleep 60"]})",
        "Authorization: Bearer " + kTokenA + "\r\nAccept: application/x-ndjson\r\n");
    ASSERT_EQ(streams.back().readHead().status, 200);
    ASSERT_NE(streams.back().nextLine().find("started"), std::string::npos);
  }
  expectRefusal(tcp(kTokenA, "POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})"), 429,
                "too_many_runs_for_caller");
  auto theirs = tcp(kTokenB, "POST", "/v1/runs", R"({"workflow":"shell","argv":["true"]})");
  EXPECT_EQ(theirs.status, 200) << theirs.body;
  expectRefusal(tcp(kTokenA, "GET", "/metrics"), 403, "forbidden");
  for (auto metrics : {tcp(kTokenWatcher, "GET", "/metrics"), tcp(kTokenB, "GET", "/metrics"),
                       local("GET", "/metrics")}) {
    ASSERT_EQ(metrics.status, 200) << metrics.body;
    for (const char* reason : {"too_many_sessions_for_caller", "too_many_runs_for_caller"})
      EXPECT_EQ(metricValue(metrics.body,
                            "sluice_api_refusals_total{reason=\"" + std::string(reason) + "\"}"),
                "1")
          << reason << "\n"
          << metrics.body;
  }
  for (auto& s : streams) s.close();
}

}  // namespace
