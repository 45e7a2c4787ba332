// The one error table: every code has a distinct name and the statuses the contract names.
#include "sluice/base/error.hpp"

#include <gtest/gtest.h>

#include <set>

namespace sluice::base {
namespace {

TEST(ErrorTest, EveryCodeHasItsOwnName) {
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c)
    EXPECT_TRUE(names.insert(codeName(static_cast<Code>(c))).second) << c;
}

TEST(ErrorTest, ExitStatusesFollowTimeoutAndDocker) {
  EXPECT_EQ(exitStatus(Code::kCommandNotFound), 127);
  EXPECT_EQ(exitStatus(Code::kCannotExecute), 126);
  EXPECT_EQ(exitStatus(Code::kInternal), 125);
  EXPECT_EQ(exitStatus(Code::kTimeout), 124);
  EXPECT_EQ(exitStatus(Code::kIntegrity), 1);
}

TEST(ErrorTest, HttpStatusesAreTheApisOwn) {
  EXPECT_EQ(httpStatus(Code::kInvalidArgument), 400);
  EXPECT_EQ(httpStatus(Code::kUnauthenticated), 401);
  EXPECT_EQ(httpStatus(Code::kPermissionDenied), 403);
  EXPECT_EQ(httpStatus(Code::kNotFound), 404);
  EXPECT_EQ(httpStatus(Code::kConflict), 409);
  EXPECT_EQ(httpStatus(Code::kTooLarge), 413);
  EXPECT_EQ(httpStatus(Code::kResourceExhausted), 429);
  EXPECT_EQ(httpStatus(Code::kUnavailable), 503);
}

TEST(ErrorTest, TextPutsWhereFirstAndErrnoStaysBeside) {
  Result<int> r = fail(Code::kInvalidArgument, "unknown key 'hots'", "policy.yaml:14:9", 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().text(), "policy.yaml:14:9: unknown key 'hots'");
  Error e{Code::kIo, "cannot open /x", {}, 2};
  EXPECT_EQ(e.text(), "cannot open /x");
  EXPECT_EQ(e.sys_errno, 2);
}

TEST(ErrorTest, ReasonWordIsTheFinerReasonOrTheCodesName) {
  Error plain{Code::kResourceExhausted, "too many"};
  EXPECT_EQ(plain.reasonWord(), "resource_exhausted");
  Error finer = plain;
  finer.reason = "too_many_sessions";
  finer.cause_code = 13;  // SQLITE_FULL travels beside the message, not in it
  EXPECT_EQ(finer.reasonWord(), "too_many_sessions");
  EXPECT_EQ(finer.text(), "too many");
}

}  // namespace
}  // namespace sluice::base
