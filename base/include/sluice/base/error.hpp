// One error type for every component boundary: a code from one small enum, a message a
// user can act on, and where it happened (a file:line:col, a table and row, a path).
// docs/architecture.md, "Errors".
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::base {

/// What went wrong, in the few classes a caller acts on differently. Each has one name, one
/// exit status and one HTTP status (error.cpp's table): bubblewrap's bind_mount_result shape.
enum class Code : std::uint8_t {
  kInvalidArgument,    ///< bad input: a flag, a policy, a JSON body
  kUnauthenticated,    ///< no or wrong credentials
  kPermissionDenied,   ///< known caller, not allowed
  kNotFound,           ///< no such thing (or not the caller's)
  kConflict,           ///< the thing is not in a state that allows this
  kTooLarge,           ///< over a size limit
  kResourceExhausted,  ///< over a quota or a concurrency limit; try later
  kUnavailable,        ///< shutting down, or a dependency is down
  kTimeout,            ///< a deadline passed
  kIntegrity,          ///< stored evidence does not verify (audit)
  kIo,                 ///< the system refused: a file, a socket, a database
  kCannotExecute,      ///< the command exists but cannot be run (exit 126)
  kCommandNotFound,    ///< the command does not exist (exit 127)
  kInternal,           ///< a bug: an invariant did not hold
};

/// An error value. `sys_errno` travels beside the message, not inside it.
struct Error {
  Error() = default;
  Error(Code c, std::string m, std::string w = {}, int e = 0)
      : code(c), message(std::move(m)), where(std::move(w)), sys_errno(e) {}

  Code code = Code::kInternal;
  std::string message;
  std::string where;  ///< "policy.yaml:14:9", "connections seq 57"; empty when none
  int sys_errno = 0;
  /// A finer machine word than the code, when a caller needs one: an API reason
  /// ("too_many_sessions"), a proxy refusal reason ("upstream_error"). Empty: codeName(code).
  std::string reason;
  /// The underlying library's own code beside `sys_errno`: SQLite's extended result code for
  /// an audit store error (so a 500 can say SQLITE_FULL), 0 when none.
  int cause_code = 0;

  /// "where: message", or the message alone.
  std::string text() const;
  /// `reason`, or the code's name when no finer reason was given.
  std::string_view reasonWord() const;
};

template <typename T>
using Result = std::expected<T, Error>;

/// A failed Result with this error, for `return fail(Code::kNotFound, "no such session");`.
inline std::unexpected<Error> fail(Code code, std::string message, std::string where = {},
                                   int sys_errno = 0) {
  return std::unexpected(Error{code, std::move(message), std::move(where), sys_errno});
}

/// "invalid_argument", "not_found", ...: the reason word of API errors and log lines.
std::string_view codeName(Code code);

/// The exit status of a command that stops with this error: 125 when sluice itself failed,
/// 126/127 for a command that cannot run / does not exist (as timeout(1) and docker), 124
/// for a deadline, 2 for bad input, 1 for evidence that does not verify.
int exitStatus(Code code);

/// The HTTP status `sluice serve` answers with: 400, 401, 403, 404, 409, 413, 429, 503, ...
int httpStatus(Code code);

}  // namespace sluice::base
