// LineReader (serve/src/mcp_lines.hpp): lines split across reads, CRLF, a last line without its
// newline, the length cap (a line at the cap is read, one past it skipped unbuffered up to its
// newline, the next one read), and the wake-up descriptor.
#include "mcp_lines.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace sluice::serve {
namespace {

class LineReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe2(in_, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(wake_, O_CLOEXEC), 0);
  }
  void TearDown() override {
    for (int fd : {in_[0], in_[1], wake_[0], wake_[1]})
      if (fd >= 0) ::close(fd);
  }
  void write(const std::string& s) {
    ASSERT_EQ(::write(in_[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void closeInput() {
    ::close(in_[1]);
    in_[1] = -1;
  }
  int in_[2] = {-1, -1};
  int wake_[2] = {-1, -1};
};

TEST_F(LineReaderTest, LinesAcrossReadsCrlfAndALastLineWithoutNewline) {
  LineReader r(in_[0], wake_[0], 1024);
  write("{\"a\":");
  std::thread later([&] {
    write("1}\r\nsecond\n\nthird");
    closeInput();
  });
  auto a = r.next();
  EXPECT_EQ(a.kind, LineReader::Kind::kLine);
  EXPECT_EQ(a.line, "{\"a\":1}");
  EXPECT_EQ(r.next().line, "second");
  auto empty = r.next();
  EXPECT_EQ(empty.kind, LineReader::Kind::kLine);
  EXPECT_EQ(empty.line, "");
  auto third = r.next();
  EXPECT_EQ(third.kind, LineReader::Kind::kLine);
  EXPECT_EQ(third.line, "third");
  EXPECT_EQ(r.next().kind, LineReader::Kind::kEnd);
  EXPECT_EQ(r.next().kind, LineReader::Kind::kEnd);
  later.join();
}

TEST_F(LineReaderTest, ALineOverTheCapIsReportedOnceAndSkippedToItsNewline) {
  LineReader r(in_[0], wake_[0], 100);
  std::thread writer([&] {
    write(std::string(100, 'a') + "\n");           // at the cap: read
    write(std::string(5000, 'b'));                 // past it, in pieces
    write(std::string(70000, 'b') + "\nafter\n");  // ... to its newline
    write(std::string(101, 'c'));                  // past it at the end of the input
    closeInput();
  });
  auto at = r.next();
  EXPECT_EQ(at.kind, LineReader::Kind::kLine);
  EXPECT_EQ(at.line.size(), 100u);
  EXPECT_EQ(r.next().kind, LineReader::Kind::kTooLong);
  auto after = r.next();
  EXPECT_EQ(after.kind, LineReader::Kind::kLine);
  EXPECT_EQ(after.line, "after");
  EXPECT_EQ(r.next().kind, LineReader::Kind::kTooLong);
  EXPECT_EQ(r.next().kind, LineReader::Kind::kEnd);  // the over-long tail is not a line
  writer.join();
}

TEST_F(LineReaderTest, TheWakeDescriptorEndsAWait) {
  LineReader r(in_[0], wake_[0], 100);
  std::thread waker([&] { ASSERT_EQ(::write(wake_[1], "x", 1), 1); });
  EXPECT_EQ(r.next().kind, LineReader::Kind::kWoken);
  waker.join();
}

TEST(JsonNestingDepth, CountsBracketsOutsideStringsAndStopsPastTheLimit) {
  EXPECT_EQ(jsonNestingDepth("1", 64), 0u);
  EXPECT_EQ(jsonNestingDepth(R"({"a":[1,{"b":[]}],"c":{}})", 64), 4u);
  EXPECT_EQ(jsonNestingDepth(R"({"s":"[[[{{{","t":"\"[[["})", 64), 1u);
  EXPECT_EQ(jsonNestingDepth(R"(["\\",[[]]])", 64), 3u);  // an escaped backslash ends
  EXPECT_EQ(jsonNestingDepth("]]]][", 64), 1u);           // stray closers do not go below 0
  EXPECT_EQ(jsonNestingDepth(std::string(1000000, '['), 64), 65u);
}

}  // namespace
}  // namespace sluice::serve
