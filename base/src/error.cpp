// The one table from error codes to names, exit statuses and HTTP statuses.
#include "sluice/base/error.hpp"

#include <array>

namespace sluice::base {
namespace {

struct CodeInfo {
  Code code;
  std::string_view name;
  int exit_status;
  int http_status;
};

// Indexed by Code; the static_assert below keeps the order honest.
constexpr std::array<CodeInfo, 14> kCodes{{
    {Code::kInvalidArgument, "invalid_argument", 2, 400},
    {Code::kUnauthenticated, "unauthenticated", 2, 401},
    {Code::kPermissionDenied, "permission_denied", 2, 403},
    {Code::kNotFound, "not_found", 2, 404},
    {Code::kConflict, "conflict", 2, 409},
    {Code::kTooLarge, "too_large", 2, 413},
    {Code::kResourceExhausted, "resource_exhausted", 125, 429},
    {Code::kUnavailable, "unavailable", 125, 503},
    {Code::kTimeout, "timeout", 124, 504},
    {Code::kIntegrity, "integrity", 1, 500},
    {Code::kIo, "io", 125, 500},
    {Code::kCannotExecute, "cannot_execute", 126, 400},
    {Code::kCommandNotFound, "command_not_found", 127, 400},
    {Code::kInternal, "internal", 125, 500},
}};

constexpr bool tableInOrder() {
  for (std::size_t i = 0; i < kCodes.size(); ++i)
    if (static_cast<std::size_t>(kCodes[i].code) != i) return false;
  return true;
}
static_assert(tableInOrder(), "kCodes must list every Code in declaration order");

const CodeInfo& info(Code code) {
  auto i = static_cast<std::size_t>(code);
  return kCodes[i < kCodes.size() ? i : static_cast<std::size_t>(Code::kInternal)];
}

}  // namespace

std::string Error::text() const { return where.empty() ? message : where + ": " + message; }

std::string_view Error::reasonWord() const {
  return reason.empty() ? codeName(code) : std::string_view(reason);
}

std::string_view codeName(Code code) { return info(code).name; }
int exitStatus(Code code) { return info(code).exit_status; }
int httpStatus(Code code) { return info(code).http_status; }

}  // namespace sluice::base
