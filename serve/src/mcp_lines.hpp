// The input side of `sluice mcp`'s stdio transport: newline-delimited messages read with a cap
// on a line's length, so a client that sends a 100 MiB line costs at most the cap in memory
// (the rest is skipped up to the next newline, never buffered), and a wake-up descriptor that
// lets another thread end the wait (SIGTERM). Also the nesting bound checked before a line is
// parsed: nlohmann::json parses deep nesting iteratively, but copies, compares and prints it
// recursively, so a line of a million '[' would overflow the stack later.
#pragma once

#include <cstddef>
#include <string>

namespace sluice::serve {

class LineReader {
 public:
  /// Reads `fd`; `wake_fd` readable ends next() with kWoken. Lines over `max_bytes` (without
  /// the newline) are reported once as kTooLong and skipped.
  LineReader(int fd, int wake_fd, std::size_t max_bytes)
      : fd_(fd), wake_fd_(wake_fd), max_(max_bytes) {}

  enum class Kind { kLine, kTooLong, kEnd, kWoken };
  struct Item {
    Kind kind;
    std::string line;  // kLine: without its newline (a trailing '\r' is dropped)
  };
  /// Blocks until a line, an over-long line, the end of the input or a wake-up.
  Item next();

 private:
  bool fill();  // false at the end of the input; sets woken_ on a wake-up

  int fd_, wake_fd_;
  std::size_t max_;
  std::string buf_;
  std::size_t scanned_ = 0;  // bytes of buf_ known to hold no newline
  bool discarding_ = false;  // inside an over-long line: drop up to its newline
  bool eof_ = false;
  bool woken_ = false;
};

/// The deepest nesting of arrays and objects in JSON text `text` (brackets inside strings do not
/// count), stopping early once it passes `limit`. Linear; the text need not be valid JSON.
std::size_t jsonNestingDepth(const std::string& text, std::size_t limit);

}  // namespace sluice::serve
