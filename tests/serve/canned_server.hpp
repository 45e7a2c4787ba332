// A Unix-socket HTTP server that answers every request with one canned status and body: what a
// tampered or hostile daemon could send the CLI's clients (`sluice approvals`, `sluice session`).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

namespace sluice::testing {

/// The request head (up to the blank line) read from `c`, or what arrived before EOF.
inline std::string readRequestHead(int c) {
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    if (n <= 0) break;
    req.append(buf, static_cast<std::size_t>(n));
  }
  return req;
}

class CannedServer {
 public:
  CannedServer(const std::string& path, std::string body, int status = 200)
      : body_(std::move(body)), status_(status) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    ::unlink(path.c_str());
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0)
      return;
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
  }
  CannedServer(const CannedServer&) = delete;
  CannedServer& operator=(const CannedServer&) = delete;

 private:
  void serve() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      // The request body, if any, is left unread: the answer does not depend on it.
      readRequestHead(c);
      const std::string resp = "HTTP/1.1 " + std::to_string(status_) +
                               " Canned\r\nContent-Type: application/json\r\nContent-Length: " +
                               std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n" +
                               body_;
      (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  std::string body_;
  int status_;
  int fd_ = -1;
  std::thread thread_;
};

}  // namespace sluice::testing
