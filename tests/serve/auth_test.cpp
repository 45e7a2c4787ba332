// The token file (serve/src/auth.hpp): its errors say what and where, and never echo a token,
// even from a line written in the wrong order.
#include "auth.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace sluice::serve {
namespace {

namespace fs = std::filesystem;

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sluice-auth-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::expected<std::vector<Token>, std::string> load(const std::string& text) {
    const fs::path f = dir_ / "tokens";
    std::ofstream(f) << text;
    ::chmod(f.c_str(), 0600);
    return loadTokenFile(f.string());
  }

  fs::path dir_;
};

TEST_F(TokenFileTest, MarksAreReadInAnyOrderOnce) {
  auto t = load("alice aaaaaaaaaaaaaaaaaaaa metrics approver\nbob bbbbbbbbbbbbbbbbbbbb\n");
  ASSERT_TRUE(t) << t.error();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_TRUE((*t)[0].approver);
  EXPECT_TRUE((*t)[0].metrics);
  EXPECT_FALSE((*t)[1].approver || (*t)[1].metrics);
  auto twice = load("alice aaaaaaaaaaaaaaaaaaaa metrics metrics\n");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().find(":1: word 4"), std::string::npos) << twice.error();
}

TEST_F(TokenFileTest, AnErrorNeverEchoesAToken) {
  const std::string secret = "s3cr3t-token-0123456789";
  for (const std::string& line : {"alice approver " + secret, "alice metrics x " + secret,
                                  "alice xxxxxxxxxxxxxxxxxxxx " + secret}) {
    SCOPED_TRACE(line);
    auto t = load(line + "\n");
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().find(secret), std::string::npos) << t.error();
    EXPECT_NE(t.error().find("tokens:1:"), std::string::npos) << t.error();
  }
}

}  // namespace
}  // namespace sluice::serve
