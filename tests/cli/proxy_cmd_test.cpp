// `sluice proxy` end to end: the real binary on 127.0.0.1:0 (port read from its log),
// forwarding under the policy directory, SIGHUP reload (a broken policy is rejected and the
// old one stays), JSON logs, SIGTERM drain with exit status 0, argument errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "proxy_test_util.hpp"

namespace sluice::proxy::testing {
namespace {

namespace fs = std::filesystem;

class ProxyCommand {
 public:
  explicit ProxyCommand(std::vector<std::string> args) {
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(pipefd[1], 2);
      std::vector<char*> argv;
      std::string bin = SLUICE_BINARY;
      argv.push_back(bin.data());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(pipefd[1]);
    err_fd_ = pipefd[0];
  }
  ~ProxyCommand() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  /// Reads stderr until `pattern` matches (bounded by `timeout`); returns the match and its
  /// groups (empty when it never matched).
  std::vector<std::string> waitFor(const std::string& pattern,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::regex re(pattern);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::smatch m;
      if (std::regex_search(stderr_, m, re)) {
        std::vector<std::string> groups(m.begin(), m.end());
        stderr_.erase(0, static_cast<std::size_t>(m.position(0) + m.length(0)));
        return groups;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd pfd{err_fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      auto n = ::read(err_fd_, buf, sizeof buf);
      if (n <= 0) return {};
      stderr_.append(buf, static_cast<std::size_t>(n));
      all_.append(buf, static_cast<std::size_t>(n));
    }
  }

  void signal(int sig) { ::kill(pid_, sig); }

  /// Waits (bounded) for the exit status; -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  const std::string& output() const { return all_; }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
  std::string stderr_;
  std::string all_;
};

std::string policyFor(std::uint16_t port, const std::string& path_glob) {
  return "apiVersion: sluice/v1\nkind: Workflow\nname: cli\negress:\n  rules:\n"
         "    - id: local\n      action: allow\n      cidrs: [\"127.0.0.0/8\"]\n"
         "      allow_private: true\n      ports: [" +
         std::to_string(port) + "]\n      paths: [\"" + path_glob + "\"]\n";
}

class ProxyCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-proxy-cmd-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "policies");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void writePolicy(const std::string& text) {
    std::ofstream(dir_ / "policies" / "cli.yaml") << text;
  }
  fs::path dir_;
  Upstreams up_;
};

TEST_F(ProxyCmdTest, ServesReloadsAndDrains) {
  writePolicy(policyFor(up_.httpPort(), "/ok/*"));
  ProxyCommand cmd({"proxy", "--policy-dir", (dir_ / "policies").string(), "--listen",
                    "127.0.0.1:0", "--workflow", "cli", "--threads", "1", "--audit",
                    (dir_ / "audit.db").string()});
  auto m = cmd.waitFor(R"(listening on 127\.0\.0\.1:(\d+))");
  ASSERT_FALSE(m.empty()) << cmd.output();
  auto port = static_cast<std::uint16_t>(std::stoi(m[1]));
  cmd.waitFor("running");
  std::string authority = "127.0.0.1:" + std::to_string(up_.httpPort());
  auto get = [&](const std::string& path) {
    Client c(port);
    c.send(getRequest(authority, path));
    return c.readResponse().status;
  };
  EXPECT_EQ(get("/ok/1"), 200);
  EXPECT_EQ(get("/no"), 403);

  // A broken policy is rejected with its diagnostics; the old one stays in force.
  writePolicy(
      "apiVersion: sluice/v1\nkind: Workflow\nname: cli\negress:\n  rules:\n"
      "    - id: x\n      action: allow\n      hots: [a]\n");
  cmd.signal(SIGHUP);
  EXPECT_FALSE(cmd.waitFor("reload rejected").empty()) << cmd.output();
  EXPECT_EQ(get("/ok/2"), 200);

  // A valid one replaces it atomically.
  writePolicy(policyFor(up_.httpPort(), "/new/*"));
  cmd.signal(SIGHUP);
  EXPECT_FALSE(cmd.waitFor("policy reloaded").empty()) << cmd.output();
  EXPECT_EQ(get("/ok/3"), 403);
  EXPECT_EQ(get("/new/1"), 200);

  cmd.signal(SIGTERM);
  EXPECT_EQ(cmd.wait(), 0) << cmd.output();
  EXPECT_TRUE(fs::exists(dir_ / "audit.db"));
  EXPECT_GT(fs::file_size(dir_ / "audit.db"), 0u);
  // The reload is generation 2 (the rejected one made none): each request row says which
  // policy decided it, and both texts are in policies.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "audit.db").c_str(), &db), SQLITE_OK);
  std::vector<std::string> rows;
  sqlite3_exec(
      db, "SELECT path || ' ' || policy_generation FROM requests ORDER BY seq",
      [](void* out, int, char** v, char**) {
        static_cast<std::vector<std::string>*>(out)->push_back(v[0] ? v[0] : "NULL");
        return 0;
      },
      &rows, nullptr);
  int policies = 0;
  sqlite3_exec(
      db, "SELECT count(*) FROM policies",
      [](void* out, int, char** v, char**) {
        *static_cast<int*>(out) = std::atoi(v[0]);
        return 0;
      },
      &policies, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(rows, (std::vector<std::string>{"/ok/1 1", "/no 1", "/ok/2 1", "/ok/3 2", "/new/1 2"}));
  EXPECT_EQ(policies, 2);
}

TEST_F(ProxyCmdTest, JsonLogLines) {
  writePolicy(policyFor(up_.httpPort(), "/*"));
  ProxyCommand cmd({"proxy", "--policy-dir", (dir_ / "policies").string(), "--listen",
                    "127.0.0.1:0", "--workflow", "cli", "--log-format", "json"});
  auto m = cmd.waitFor(R"(\{[^\n]*"msg":"listening on [^\n]*\}\n)");
  ASSERT_FALSE(m.empty()) << cmd.output();
  auto line = nlohmann::json::parse(m[0]);
  EXPECT_EQ(line["logger"], "proxy");
  EXPECT_EQ(line["level"], "info");
  cmd.signal(SIGTERM);
  EXPECT_EQ(cmd.wait(), 0);
}

TEST_F(ProxyCmdTest, UnknownWorkflowAndBadListenFail) {
  writePolicy(policyFor(up_.httpPort(), "/*"));
  {
    ProxyCommand cmd({"proxy", "--policy-dir", (dir_ / "policies").string(), "--listen",
                      "127.0.0.1:0", "--workflow", "nope"});
    EXPECT_EQ(cmd.wait(), 1);
    cmd.waitFor("x", std::chrono::milliseconds(100));
    // Names the workflows the directory has, as `sluice mcp` does.
    EXPECT_NE(cmd.output().find("--workflow nope: no such workflow in " +
                                (dir_ / "policies").string() + " (it has: cli)"),
              std::string::npos)
        << cmd.output();
  }
  {
    ProxyCommand cmd({"proxy", "--policy-dir", (dir_ / "policies").string(), "--listen",
                      "127.0.0.1", "--workflow", "cli"});
    EXPECT_EQ(cmd.wait(), 2);
  }
  {
    ProxyCommand cmd({"proxy", "--policy-dir", (dir_ / "policies").string(), "--listen",
                      "127.0.0.1:0", "--listen", "127.0.0.1:0", "--workflow", "cli"});
    EXPECT_EQ(cmd.wait(), 2);
  }
}

}  // namespace
}  // namespace sluice::proxy::testing
