// serve_client: the client side of bench/serve_latency.sh in C++, so that the client's own cost
// (an interpreter, its HTTP library) does not hide the server's. Latency of `sluice serve`
// calls measured at the client over its Unix socket, one kept-alive connection per client
// thread, plain blocking sockets and a minimal HTTP/1.1 reader (Content-Length bodies only:
// what the daemon sends for a non-streamed answer).
//
//   serve_client SOCKET runs N            POST /v1/runs of /bin/true, sequential (PACE_MS=M:
//                                         M ms between requests, so a warm pool can refill)
//   serve_client SOCKET exec N            one session, N execs of /bin/true, sequential (PACE_MS
//                                         as for runs)
//   serve_client SOCKET concurrent N C    N runs spread over C concurrent clients
//   serve_client SOCKET session N         N times: create a session and exec /bin/true (timed
//                                         together), then delete it (untimed)
//   serve_client SOCKET health N          GET /v1/healthz (the HTTP round trip alone)
//
// Env: WORKFLOW (default "bench"), PROGRAM (default /bin/true). Prints one JSON object:
// {"n", "p50_ms", "p99_ms", "mean_ms", "per_s", "errors", "refused", "ms"} (ms: every call,
// sorted).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Reply {
  int status = 0;
  std::string body;
};

class Connection {
 public:
  explicit Connection(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      std::fprintf(stderr, "serve_client: connect %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(1);
    }
  }
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // One request and its answer; status 0 when the connection failed.
  Reply call(const char* method, const std::string& target, const std::string& body) {
    std::string req = std::string(method) + " " + target +
                      " HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
                      "Content-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
      return {};
    std::size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return {};
    Reply r;
    r.status = std::atoi(buf_.c_str() + 9);
    std::size_t length = 0;
    std::string head = buf_.substr(0, end);
    for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (auto at = head.find("\r\ncontent-length:"); at != std::string::npos)
      length = std::strtoul(head.c_str() + at + 17, nullptr, 10);
    buf_.erase(0, end + 4);
    while (buf_.size() < length)
      if (!fill()) return {};
    r.body = buf_.substr(0, length);
    buf_.erase(0, length);
    return r;
  }

 private:
  bool fill() {
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string buf_;
};

// `"key":"value"` of a flat JSON answer (the session id), without a JSON library.
std::string field(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  auto at = json.find(k);
  if (at == std::string::npos) return "";
  at += k.size();
  return json.substr(at, json.find('"', at) - at);
}

// A receipt of a program that exited 0: its "exit" object says code 0.
bool exitedZero(const Reply& r) {
  if (r.status != 200) return false;
  auto at = r.body.find("\"exit\":{");
  return at != std::string::npos && r.body.find("\"code\":0", at) < r.body.find('}', at);
}

struct Samples {
  std::vector<double> ms;
  int errors = 0;
  int refused = 0;  // answered 429 by a quota (--max-runs): neither a run nor a failure
  void add(Clock::time_point t0, bool ok) {
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!ok) ++errors;
  }
};

void print(Samples s, double wall_s) {
  std::sort(s.ms.begin(), s.ms.end());
  const std::size_t n = s.ms.size();
  if (n == 0) {
    std::printf("{\"n\": 0, \"errors\": %d, \"refused\": %d}\n", s.errors, s.refused);
    return;
  }
  const double p50 = n % 2 ? s.ms[n / 2] : (s.ms[n / 2 - 1] + s.ms[n / 2]) / 2;
  const double p99 = s.ms[std::min(n - 1, static_cast<std::size_t>(static_cast<double>(n) * 0.99))];
  double sum = 0;
  for (double v : s.ms) sum += v;
  std::printf(
      "{\"n\": %zu, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"mean_ms\": %.3f, \"per_s\": %.1f, "
      "\"errors\": %d, \"refused\": %d, \"ms\": [",
      n, p50, p99, sum / static_cast<double>(n), static_cast<double>(n) / wall_s, s.errors,
      s.refused);
  for (std::size_t i = 0; i < n; ++i) std::printf("%s%.3f", i ? ", " : "", s.ms[i]);
  std::printf("]}\n");
}

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: serve_client SOCKET runs|exec|session|health|concurrent N [CLIENTS]\n");
    return 2;
  }
  const std::string sock = argv[1], mode = argv[2];
  const int n = std::atoi(argv[3]);
  const char* wf = std::getenv("WORKFLOW");
  const std::string workflow = wf ? wf : "bench";
  // PROGRAM: what runs and execs start (default /bin/true; a path without quotes or escapes).
  const char* prog = std::getenv("PROGRAM");
  const std::string program = prog ? prog : "/bin/true";
  const std::string run = R"({"workflow":")" + workflow + R"(","argv":[")" + program + R"("]})";
  const std::string exec = R"({"argv":[")" + program + R"("]})";
  const std::string create = R"({"workflow":")" + workflow + R"("})";
  Samples s;
  Clock::time_point t0;
  if (mode == "runs") {
    Connection c(sock);
    for (int i = 0; i < 5; ++i) c.call("POST", "/v1/runs", run);  // warm-up
    const char* pace_env = std::getenv("PACE_MS");
    const auto pace = std::chrono::milliseconds(pace_env ? std::atoi(pace_env) : 0);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      const auto t = Clock::now();
      s.add(t, exitedZero(c.call("POST", "/v1/runs", run)));
      if (pace.count() > 0) std::this_thread::sleep_for(pace);  // a warm pool refills
    }
  } else if (mode == "exec") {
    Connection c(sock);
    const Reply made = c.call("POST", "/v1/sessions", create);
    const std::string id = field(made.body, "id");
    if (made.status != 201 || id.empty()) {
      std::fprintf(stderr, "serve_client: session: %d %s\n", made.status, made.body.c_str());
      return 1;
    }
    const std::string target = "/v1/sessions/" + id + "/exec";
    for (int i = 0; i < 5; ++i) c.call("POST", target, exec);
    t0 = Clock::now();
    const char* pace_env = std::getenv("PACE_MS");
    const auto pace = std::chrono::milliseconds(pace_env ? std::atoi(pace_env) : 0);
    for (int i = 0; i < n; ++i) {
      const auto t = Clock::now();
      s.add(t, exitedZero(c.call("POST", target, exec)));
      if (pace.count() > 0) std::this_thread::sleep_for(pace);
    }
    const double wall = seconds(t0);
    c.call("DELETE", "/v1/sessions/" + id, "");
    print(s, wall);
    return 0;
  } else if (mode == "session") {
    Connection c(sock);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      const auto t = Clock::now();
      const Reply made = c.call("POST", "/v1/sessions", create);
      const std::string id = field(made.body, "id");
      const bool ok =
          made.status == 201 && exitedZero(c.call("POST", "/v1/sessions/" + id + "/exec", exec));
      s.add(t, ok);
      c.call("DELETE", "/v1/sessions/" + id, "");
      const char* pace_env = std::getenv("PACE_MS");
      if (pace_env) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(pace_env)));
    }
  } else if (mode == "health") {
    Connection c(sock);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      const auto t = Clock::now();
      s.add(t, c.call("GET", "/v1/healthz", "").status == 200);
    }
  } else if (mode == "concurrent") {
    const int clients = argc > 4 ? std::atoi(argv[4]) : 100;
    std::mutex mu;
    std::vector<std::thread> threads;
    t0 = Clock::now();
    for (int k = 0; k < clients; ++k)
      threads.emplace_back([&, count = n / clients] {
        auto c = std::make_unique<Connection>(sock);
        Samples mine;
        for (int i = 0; i < count; ++i) {
          const auto t = Clock::now();
          const Reply r = c->call("POST", "/v1/runs", run);
          // A quota's refusal is quick and runs nothing: counted apart, not as a run's time.
          // The daemon closes the connection after it, so the client connects again.
          if (r.status == 429) {
            ++mine.refused;
            c = std::make_unique<Connection>(sock);
          } else {
            mine.add(t, exitedZero(r));
          }
        }
        std::lock_guard lock(mu);
        s.ms.insert(s.ms.end(), mine.ms.begin(), mine.ms.end());
        s.errors += mine.errors;
        s.refused += mine.refused;
      });
    for (auto& t : threads) t.join();
  } else {
    std::fprintf(stderr, "serve_client: unknown mode %s\n", mode.c_str());
    return 2;
  }
  print(s, seconds(t0));
  return 0;
}
