// serve/src/systemd.cpp: the sd_listen_fds protocol and JOURNAL_STREAM, read from a real
// environment and real descriptors (deploy.socket_activation runs them under systemd's tool).
#include "sluice/serve/systemd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace sluice::serve {
namespace {

// Puts a fresh socket at fds 3 and 4 for one test (as systemd passes them), restoring what the
// test process had there afterwards.
class PassedFds : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int fd : {3, 4}) saved_[fd - 3] = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    // Moved to 3 and 4 (socketpair may have returned exactly those: then nothing moves).
    for (int i = 0; i < 2; ++i) {
      if (sv[i] == 3 + i) continue;
      ASSERT_EQ(::dup2(sv[i], 3 + i), 3 + i);
      if (sv[i] != 3 && sv[i] != 4) ::close(sv[i]);
    }
  }
  void TearDown() override {
    for (int fd : {3, 4}) {
      ::close(fd);
      if (saved_[fd - 3] >= 0) {
        ::dup2(saved_[fd - 3], fd);
        ::close(saved_[fd - 3]);
      }
    }
    for (const char* v : {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "JOURNAL_STREAM"})
      ::unsetenv(v);
  }
  static void setListen(pid_t pid, const char* fds, const char* names) {
    ::setenv("LISTEN_PID", std::to_string(pid).c_str(), 1);
    ::setenv("LISTEN_FDS", fds, 1);
    if (names != nullptr) ::setenv("LISTEN_FDNAMES", names, 1);
  }
  static bool environmentCleared() {
    return !std::getenv("LISTEN_PID") && !std::getenv("LISTEN_FDS") &&
           !std::getenv("LISTEN_FDNAMES");
  }

 private:
  int saved_[2] = {-1, -1};
};

TEST_F(PassedFds, TakesEachSocketFromFdThreeWithItsNameAndCloseOnExec) {
  setListen(::getpid(), "2", "api:metrics");
  const auto sockets = takeSystemdSockets();
  ASSERT_EQ(sockets.size(), 2u);
  EXPECT_EQ(sockets[0].fd, 3);
  EXPECT_EQ(sockets[0].name, "api");
  EXPECT_EQ(sockets[1].fd, 4);
  EXPECT_EQ(sockets[1].name, "metrics");
  for (int fd : {3, 4}) EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "fd " << fd;
  EXPECT_TRUE(environmentCleared()) << "a child would inherit LISTEN_*";
}

TEST_F(PassedFds, MissingNamesAreEmpty) {
  setListen(::getpid(), "2", nullptr);
  const auto sockets = takeSystemdSockets();
  ASSERT_EQ(sockets.size(), 2u);
  EXPECT_EQ(sockets[0].name, "");
  EXPECT_EQ(sockets[1].name, "");
}

// Variables meant for another process (a parent that exec'd us without resetting them) name
// descriptors that are not sockets of ours: nothing is taken, and they are still removed.
TEST_F(PassedFds, AnotherProcessesVariablesAreIgnoredAndRemoved) {
  setListen(::getpid() + 1, "2", "api:metrics");
  EXPECT_TRUE(takeSystemdSockets().empty());
  EXPECT_TRUE(environmentCleared());
}

TEST_F(PassedFds, MalformedCountsTakeNothing) {
  for (const char* fds : {"", "0", "-1", "2x", "x"}) {
    setListen(::getpid(), fds, "api");
    EXPECT_TRUE(takeSystemdSockets().empty()) << "LISTEN_FDS=" << fds;
  }
}

TEST_F(PassedFds, JournalStreamMustNameStderrItself) {
  EXPECT_FALSE(stderrIsJournal()) << "no JOURNAL_STREAM";
  struct stat st {};
  ASSERT_EQ(::fstat(STDERR_FILENO, &st), 0);
  const std::string self = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  ::setenv("JOURNAL_STREAM", self.c_str(), 1);
  EXPECT_TRUE(stderrIsJournal());
  // Inherited by a process whose stderr was redirected elsewhere: not the journal.
  const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  ::setenv("JOURNAL_STREAM", other.c_str(), 1);
  EXPECT_FALSE(stderrIsJournal());
  ::setenv("JOURNAL_STREAM", "garbage", 1);
  EXPECT_FALSE(stderrIsJournal());
}

}  // namespace
}  // namespace sluice::serve
