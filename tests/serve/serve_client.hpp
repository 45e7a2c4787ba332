// The HTTP client of the serve tests (serve_test.cpp, approvals_test.cpp): a blocking HTTP/1.1
// client over the daemon's Unix socket or TCP listener, NDJSON line reading, and validation of
// responses against schemas/api.v1.yaml with tests/schemas/check_api.py.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace serve_test {

using nlohmann::json;

struct Response {
  int status = 0;
  std::string head;
  std::string body;
  std::string header(const std::string& name) const {
    std::string lower_head;
    for (char c : head)
      lower_head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n";
    for (char c : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    key += ": ";
    auto at = lower_head.find(key);
    if (at == std::string::npos) return "";
    auto start = at + key.size();
    return head.substr(start, head.find("\r\n", start) - start);
  }
  json js() const { return json::parse(body, nullptr, false); }
};

// A blocking HTTP/1.1 client: one request per connection (Connection: close), de-chunked body.
class Http {
 public:
  static Http unix(const std::string& path) {
    Http h;
    h.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    if (::connect(h.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(h.fd_);
      h.fd_ = -1;
    }
    return h;
  }
  static Http tcp(std::uint16_t port) {
    Http h;
    h.fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(h.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(h.fd_);
      h.fd_ = -1;
    }
    return h;
  }
  Http(Http&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ~Http() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Reads give up after `seconds` (then nextLine() returns "" as at the end).
  void receiveTimeout(int seconds) {
    timeval tv{seconds, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  bool send(const std::string& method, const std::string& target, const std::string& body = "",
            const std::string& extra = "") {
    std::string req =
        method + " " + target + " HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n" + extra;
    if (!body.empty() || method == "POST" || method == "PUT")
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    req += "\r\n" + body;
    return ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  // Reads the status line and headers only.
  Response readHead() {
    Response r;
    while (buf_.find("\r\n\r\n") == std::string::npos)
      if (!fill()) return r;
    auto end = buf_.find("\r\n\r\n");
    r.head = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    if (r.head.size() > 12) r.status = std::atoi(r.head.c_str() + 9);
    return r;
  }
  // The next line of a chunked NDJSON body ("" at the end).
  std::string nextLine() {
    for (;;) {
      auto nl = decoded_.find('\n');
      if (nl != std::string::npos) {
        std::string line = decoded_.substr(0, nl);
        decoded_.erase(0, nl + 1);
        return line;
      }
      if (!readChunk()) return "";
    }
  }
  Response read() {
    Response r = readHead();
    if (r.status == 0) return r;
    if (r.header("transfer-encoding") == "chunked") {
      while (readChunk()) {
      }
      r.body = decoded_;
    } else {
      while (fill()) {
      }
      r.body = buf_;
    }
    return r;
  }
  void close() {
    ::close(fd_);
    fd_ = -1;
  }

 private:
  Http() = default;
  bool fill() {
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  bool readChunk() {
    while (buf_.find("\r\n") == std::string::npos)
      if (!fill()) return false;
    std::size_t size = std::stoul(buf_.substr(0, buf_.find("\r\n")), nullptr, 16);
    buf_.erase(0, buf_.find("\r\n") + 2);
    while (buf_.size() < size + 2)
      if (!fill()) return false;
    decoded_ += buf_.substr(0, size);
    buf_.erase(0, size + 2);
    return size != 0;
  }
  int fd_ = -1;
  std::string buf_, decoded_;
};

/// A fresh directory for the running test, /tmp/<prefix>-<pid>-<test name> (emptied if a
/// previous run left it), holding an empty policies/ for the daemon's workflows.
inline std::filesystem::path freshTestDir(const std::string& prefix) {
  namespace fs = std::filesystem;
  fs::path dir =
      fs::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir / "policies");
  return dir;
}

/// Writes `lines` ("name token [role...]" a line) as `dir`/tokens, mode 0600 as the daemon
/// requires of its token file.
inline void writeTokenFile(const std::filesystem::path& dir, const std::string& lines) {
  std::ofstream(dir / "tokens") << lines;
  ::chmod((dir / "tokens").c_str(), 0600);
}

// Validates `instance` against component `name` of schemas/api.v1.yaml.
inline void expectSchema(const std::string& name, const json& instance) {
  namespace fs = std::filesystem;
  static const std::string checker = SLUICE_SOURCE_DIR "/tests/schemas/check_api.py";
  if (!fs::exists(checker)) {
    ADD_FAILURE() << checker << " missing";
    return;
  }
  char tmpl[] = "/tmp/sluice-serve-json-XXXXXX";
  int fd = ::mkstemp(tmpl);
  std::string text = instance.dump();
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
  // The Debian interpreter: python3-jsonschema and python3-yaml are installed into it.
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string cmd = python + " " + checker + " " + name + " " + tmpl + " 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char b[4096];
    while (std::fgets(b, sizeof b, p)) out += b;
    int rc = ::pclose(p);
    EXPECT_EQ(rc, 0) << name << " does not validate: " << out << "\n" << text.substr(0, 2000);
  }
  ::unlink(tmpl);
}

}  // namespace serve_test
