// Crash safety: a child process writes events and receipts and is SIGKILLed at random points;
// the database must reopen, verify, and hold every receipt whose recordExecution had returned.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <string>

#include "audit_test_util.hpp"
#include "sluice/audit/store.hpp"

namespace sluice::audit {
namespace {

using testing::RawDb;
using testing::TempDir;

/// In a child: commits execution `exec`'s receipt durably, then reports its id over `fd` (one
/// line), so the parent knows it must survive the kill. Exits 4 or 5 when either fails.
void commitReceiptAndSay(Store& store, const std::string& exec, int fd) {
  if (!store.recordExecution(testing::sampleExecution(exec))) _exit(4);
  const std::string line = exec + "\n";
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(5);
}

/// Child body: no gtest assertions here; reports each durable receipt id over `fd`.
[[noreturn]] void writerChild(const std::filesystem::path& db, int round, int fd) {
  StoreOptions o;
  o.batch_rows = 64;
  auto store = Store::open(db, o);
  if (!store) _exit(3);
  for (int i = 0; i < 100000; ++i) {
    std::string exec = "r" + std::to_string(round) + "-" + std::to_string(i);
    for (int j = 0; j < 10; ++j) {
      (*store)->recordConnection(testing::sampleConnection(j, exec));
      (*store)->recordRequest(testing::sampleRequest(j, exec));
    }
    commitReceiptAndSay(**store, exec, fd);
  }
  _exit(0);
}

TEST(StoreCrashTest, SigkillAtRandomPointsLosesNoReturnedReceipt) {
  TempDir dir;
  auto db = dir / "audit.db";
  std::mt19937 rng(std::random_device{}());
  std::set<std::string> durable;
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      writerChild(db, round, fds[1]);
    }
    close(fds[1]);
    // Let it record a random number of receipts, then kill it at a random moment.
    int want = std::uniform_int_distribution<int>(1, 40)(rng);
    int got = 0;
    std::string buf;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (got < want && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char tmp[4096];
      ssize_t n = read(fds[0], tmp, sizeof tmp);
      if (n <= 0) break;
      buf.append(tmp, static_cast<std::size_t>(n));
      got = static_cast<int>(std::count(buf.begin(), buf.end(), '\n'));
    }
    usleep(std::uniform_int_distribution<int>(0, 5000)(rng));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with status " << WEXITSTATUS(status);
    // Everything the child reported before dying was reported after recordExecution returned.
    char tmp[4096];
    ssize_t n;
    while ((n = read(fds[0], tmp, sizeof tmp)) > 0) buf.append(tmp, static_cast<std::size_t>(n));
    close(fds[0]);
    for (std::size_t pos = 0, nl; (nl = buf.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      durable.insert(buf.substr(pos, nl - pos));
    }

    auto v = verify(db);
    ASSERT_TRUE(v.has_value()) << v.error().message;
    ASSERT_TRUE(v->ok) << "round " << round << ": " << v->first_broken;
    // The store reopens for writing after the crash.
    ASSERT_TRUE(Store::open(db).has_value());
  }
  ASSERT_FALSE(durable.empty());
  RawDb raw(db);
  for (const auto& id : durable) {
    EXPECT_EQ(raw.integer("SELECT count(*) FROM executions WHERE id = '" + id + "'"), 1) << id;
  }
}

/// Child body of a short session as `sluice run` has it: open (appending to the kept WAL, or
/// copying and restarting it), one receipt, close without copying; reports the receipt's id.
[[noreturn]] void shortSessionChild(const std::filesystem::path& db, int round, int fd) {
  StoreOptions o;
  o.checkpoint_on_close = false;
  auto store = Store::openAsync(db, o);
  if (!store->ready()) _exit(3);
  std::string exec = "s" + std::to_string(round);
  for (int j = 0; j < 5; ++j) store->recordConnection(testing::sampleConnection(j, exec));
  commitReceiptAndSay(*store, exec, fd);
  store.reset();
  _exit(0);
}

TEST(StoreCrashTest, SigkillDuringShortSessionsOpensLosesNoReturnedReceipt) {
  // Killed at a random moment of its few milliseconds: often while the writer readies the WAL
  // at open (its no-op frame, the copy into the database, the restart).
  TempDir dir;
  auto db = dir / "audit.db";
  std::mt19937 rng(std::random_device{}());
  std::set<std::string> durable;
  {
    // Created first: a kill while the file is being created is another matter (an empty file).
    StoreOptions o;
    o.checkpoint_on_close = false;
    ASSERT_TRUE(testing::openStore(db, o));
  }
  for (int round = 0; round < 60; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      shortSessionChild(db, round, fds[1]);
    }
    close(fds[1]);
    // Every fourth session lives: the WAL grows past 64 frames, so later opens copy it.
    if (round % 4 != 3) {
      usleep(std::uniform_int_distribution<int>(0, 10000)(rng));
      kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) || WEXITSTATUS(status) == 0)
        << "child failed with status " << WEXITSTATUS(status);
    std::string buf(64, '\0');
    ssize_t n = read(fds[0], buf.data(), buf.size());
    close(fds[0]);
    if (n > 0) durable.insert(buf.substr(0, buf.find('\n')));
    auto v = verify(db);
    ASSERT_TRUE(v.has_value()) << v.error().message;
    ASSERT_TRUE(v->ok) << "round " << round << ": " << v->first_broken;
  }
  ASSERT_GE(durable.size(), 15u);  // the sessions left alive, at least
  RawDb raw(db);
  for (const auto& id : durable) {
    EXPECT_EQ(raw.integer("SELECT count(*) FROM executions WHERE id = '" + id + "'"), 1) << id;
  }
}

}  // namespace
}  // namespace sluice::audit
