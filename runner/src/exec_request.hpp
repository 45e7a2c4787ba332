// One exec of a session, as it travels from sluice to the session's init: a fixed header with
// the exec's fds (SCM_RIGHTS) in one SOCK_SEQPACKET message, and argv, envp and the working
// directory in a memfd laid out so that init, which must not allocate, only maps it privately
// and fills in a pointer table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::runner::detail {

inline constexpr std::uint32_t kExecRequestMagic = 0x45584543;  // "EXEC"

/// The order of the fds that come with an ExecRequest.
enum ExecFd : int {
  kExecBlob = 0,  // memfd: encodeExecBlob()
  kExecStdout,    // the program's stdout (write end)
  kExecStderr,
  kExecError,   // ChildMessage on a failure; EOF once the program execs
  kExecReport,  // InitReport once everything the exec started is gone
  kExecStdin,   // optional: the program's stdin (read end); absent means /dev/null
  kExecFdCount
};

struct ExecRequest {
  std::uint32_t magic = kExecRequestMagic;
  std::uint32_t fd_count = 0;  // kExecStdin or kExecFdCount
  std::int32_t seq = 0;        // 1, 2, ...: stop signals for this exec carry it (sigqueue)
};

/// argv (at least one), env (K=V) and cwd as one buffer for a memfd. Strings hold no NUL.
std::string encodeExecBlob(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::string& cwd);

/// What decodeExecBlob() finds, pointing into the blob.
struct ExecArgs {
  char** argv = nullptr;  // NULL-terminated
  char** envp = nullptr;  // NULL-terminated
  const char* cwd = nullptr;
};

/// Child side, no allocation: checks a writable private mapping of encodeExecBlob()'s bytes
/// and fills its pointer table. False when the bytes are not such a blob.
bool decodeExecBlob(char* mem, std::size_t size, ExecArgs& out);

}  // namespace sluice::runner::detail
