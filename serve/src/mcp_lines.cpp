// Bounded line reading for the MCP stdio transport (mcp_lines.hpp).
#include "mcp_lines.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sluice::serve {

LineReader::Item LineReader::next() {
  for (;;) {
    const auto nl = buf_.find('\n', scanned_);
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      scanned_ = 0;
      if (discarding_) {
        discarding_ = false;
        continue;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return {Kind::kLine, std::move(line)};
    }
    scanned_ = buf_.size();
    if (discarding_) {
      buf_.clear();
      scanned_ = 0;
    } else if (buf_.size() > max_) {
      // Report it now, not at its newline: the client learns at once, and nothing of it is kept.
      discarding_ = true;
      buf_.clear();
      scanned_ = 0;
      return {Kind::kTooLong, {}};
    }
    if (woken_) return {Kind::kWoken, {}};
    if (eof_) {
      // A last message without its newline still counts (the client closed right after it).
      if (!buf_.empty() && !discarding_) {
        std::string line = std::move(buf_);
        buf_.clear();
        scanned_ = 0;
        return {Kind::kLine, std::move(line)};
      }
      return {Kind::kEnd, {}};
    }
    fill();
  }
}

bool LineReader::fill() {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, wake_fd_ >= 0 ? 2 : 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      eof_ = true;
      return false;
    }
    break;
  }
  if (wake_fd_ >= 0 && (fds[1].revents & POLLIN)) {
    woken_ = true;
    return false;
  }
  char chunk[65536];
  for (;;) {
    ssize_t got = ::read(fd_, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      eof_ = true;  // the end, or an input that cannot be read any more: the client is gone
      return false;
    }
    buf_.append(chunk, static_cast<std::size_t>(got));
    return true;
  }
}

std::size_t jsonNestingDepth(const std::string& text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace sluice::serve
