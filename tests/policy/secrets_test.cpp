// The secret store: permission checks, sources, protected memory, and no value in any error.
#include "sluice/policy/secrets.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sluice/policy/loader.hpp"

namespace sluice::policy {
namespace {

namespace fs = std::filesystem;

class Secrets : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-secrets-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    auto p = dir_ / name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p.string();
  }
  fs::path dir_;
};

TEST_F(Secrets, LoadsValueFileAndEnvSources) {
  write("token.txt", "from-file-s3cr3t\n");
  ::setenv("SLUICE_TEST_SECRET_ENV", "from-env-s3cr3t", 1);
  auto f = write("secrets.yaml",
                 "a: {value: inline-s3cr3t}\nb: {file: " + (dir_ / "token.txt").string() +
                     "}\nc: {env: SLUICE_TEST_SECRET_ENV}\n");
  auto store = loadSecretsFile(f);
  ASSERT_TRUE(store) << store.error();
  EXPECT_EQ((*store)->find("a").value(), "inline-s3cr3t");
  EXPECT_EQ((*store)->find("b").value(), "from-file-s3cr3t");  // trailing newline dropped
  EXPECT_EQ((*store)->find("c").value(), "from-env-s3cr3t");
  EXPECT_FALSE((*store)->find("d"));
  EXPECT_EQ((*store)->names(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(Secrets, RefusesFilesOthersCanRead) {
  auto f = write("secrets.yaml", "a: {value: s3cr3t-value}\n", 0644);
  auto store = loadSecretsFile(f);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().find("mode 0644"), std::string::npos) << store.error();
  EXPECT_NE(store.error().find("chmod 600"), std::string::npos);
  EXPECT_EQ(store.error().find("s3cr3t-value"), std::string::npos);
  EXPECT_FALSE(loadSecretsFile(write("g.yaml", "a: {value: x}\n", 0640)));
  EXPECT_TRUE(loadSecretsFile(write("ok.yaml", "a: {value: x}\n", 0400)));
}

TEST_F(Secrets, RefusesFilesOwnedBySomeoneElse) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  auto f = write("secrets.yaml", "a: {value: x}\n");
  ASSERT_EQ(::chown(f.c_str(), 65534, 65534), 0);
  auto store = loadSecretsFile(f);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().find("owned by uid 65534"), std::string::npos) << store.error();
}

TEST_F(Secrets, ErrorsNeverQuoteValues) {
  auto f = write("secrets.yaml", "a: {value: \"unterminated-s3cr3t\n");
  auto store = loadSecretsFile(f);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().find("s3cr3t"), std::string::npos) << store.error();
  auto g = write("g.yaml", "a: {value: s3cr3t-1}\nb: {env: SLUICE_TEST_UNSET_VAR_XYZ}\n");
  store = loadSecretsFile(g);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().find("secret 'b'"), std::string::npos) << store.error();
  EXPECT_NE(store.error().find("SLUICE_TEST_UNSET_VAR_XYZ is not set"), std::string::npos);
  EXPECT_EQ(store.error().find("s3cr3t"), std::string::npos);
  EXPECT_FALSE(loadSecretsFile(write("h.yaml", "a: {colour: red}\n")));
  EXPECT_FALSE(loadSecretsFile(dir_ / "missing.yaml"));
}

// Like the policy loader: every problem in the file, each with FILE:LINE:COL and the secret's
// name, not only the first.
TEST_F(Secrets, EveryProblemIsReportedWithLineAndColumn) {
  auto f = write("secrets.yaml",
                 "a: {value: fine-s3cr3t}\n"
                 "b: {env: SLUICE_TEST_UNSET_VAR_XYZ}\n"
                 "c: {colour: red}\n"
                 "d: {value: [1]}\n"
                 "e: just-a-s3cr3t\n");
  auto store = loadSecretsFile(f);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error(),
            f + ":2:10: secret 'b': environment variable SLUICE_TEST_UNSET_VAR_XYZ is not set\n" +
                f + ":3:5: secret 'c': unknown source 'colour' (use value, file or env)\n" + f +
                ":4:12: secret 'd': 'value' must be a string\n" + f +
                ":5:1: secret 'e': expected exactly one of {value: ...}, {file: PATH}, {env: VAR}");
  EXPECT_EQ(store.error().find("s3cr3t"), std::string::npos);
  auto as_error = loadSecretStore(f);
  ASSERT_FALSE(as_error);
  EXPECT_EQ(as_error.error().code, base::Code::kInvalidArgument);
  EXPECT_EQ(as_error.error().where, f + ":2:10");
  EXPECT_EQ(as_error.error().message, store.error());
}

// A secret goes into an HTTP header: CR/LF would split it and add fields of the secret's
// choosing upstream (X-Smuggled-By-Secret). Refused at load, naming the secret, never the value.
TEST_F(Secrets, ValuesThatCannotBeAHeaderValueAreRefused) {
  auto two_lines = write("two.txt", "tok3n-line-one\nX-Smuggled-By-Secret: 1\n");
  auto cases = {
      write("a.yaml", "tok: {value: \"s3cr3t\\r\\nX-Smuggled-By-Secret: 1\"}\n"),
      write("b.yaml", "tok: {file: " + two_lines + "}\n"),
      write("c.yaml", "tok: {value: \"s3cr3t\\0x\"}\n"),
      write("d.yaml", "tok: {value: \"s3cr3t\\x01\"}\n"),
  };
  for (const auto& f : cases) {
    auto store = loadSecretsFile(f);
    ASSERT_FALSE(store) << f;
    EXPECT_NE(store.error().find("secret 'tok'"), std::string::npos) << store.error();
    EXPECT_NE(store.error().find("HTTP header value"), std::string::npos) << store.error();
    EXPECT_EQ(store.error().find("s3cr3t"), std::string::npos) << store.error();
    EXPECT_EQ(store.error().find("tok3n"), std::string::npos) << store.error();
  }
  // One line with a trailing newline is the normal shape of a secret file: accepted.
  auto one = write("one.txt", "tok3n\n");
  auto store = loadSecretsFile(write("e.yaml", "tok: {file: " + one + "}\n"));
  ASSERT_TRUE(store) << store.error();
  EXPECT_EQ(store.value()->find("tok").value(), "tok3n");
}

TEST_F(Secrets, ValuesLiveInNonDumpableMemory) {
  auto store = makeSecretStore({{"k", "protected-value"}});
  auto v = store->find("k").value();
  auto addr = reinterpret_cast<std::uintptr_t>(v.data());
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false, found = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') < 30) {
      in_mapping = addr >= lo && addr < hi;
    } else if (in_mapping && line.rfind("VmFlags:", 0) == 0) {
      found = true;
      EXPECT_NE(line.find(" dd"), std::string::npos) << line;  // MADV_DONTDUMP
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(Secrets, MissingSecretsAndTemplates) {
  auto w = parseWorkflow(
      "apiVersion: sluice/v1\nkind: Workflow\nname: w\negress:\n  rules:\n"
      "    - id: r\n      action: allow\n      hosts: [a.example]\n      tls: inspect\n"
      "      inject:\n        headers:\n          Authorization: \"Bearer ${secret:tok}\"\n"
      "          X-Other: \"${secret:other}\"\n",
      "w.yaml");
  ASSERT_TRUE(w) << w.error().str();
  auto store = makeSecretStore({{"tok", "T0K"}});
  EXPECT_EQ(missingSecrets(*w, store.get()), std::vector<std::string>{"other"});
  EXPECT_EQ(missingSecrets(*w, nullptr), (std::vector<std::string>{"other", "tok"}));
  EXPECT_EQ(expandSecretTemplate("Bearer ${secret:tok}!", *store).value(), "Bearer T0K!");
  auto missing = expandSecretTemplate("${secret:other}", *store);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error(), "secret 'other' is not in the secret store");
  std::string s = "abc";
  wipeString(s);
  EXPECT_TRUE(s.empty());
}

}  // namespace
}  // namespace sluice::policy
