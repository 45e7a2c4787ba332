// One exec of a session, as it travels from sluice to the session's init: a fixed header with
// the exec's fds (SCM_RIGHTS) in one SOCK_SEQPACKET message, and argv, envp and the working
// directory laid out so that init, which must not allocate, only fills in a pointer table. A
// blob of up to kExecInlineMax bytes follows the header in the same message; a larger one comes
// in a memfd that init maps privately.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::runner::detail {

inline constexpr std::uint32_t kExecRequestMagic = 0x45584543;  // "EXEC"

/// The order of the fds that come with an ExecRequest: the four always sent, then the optional
/// ones in this order, each only when its flag is set.
enum ExecFd : int {
  kExecStdout = 0,  // the program's stdout (write end)
  kExecStderr,
  kExecError,   // ChildMessage on a failure; EOF once the program execs
  kExecReport,  // InitReport once everything the exec started is gone
  kExecStdin,   // kExecHasStdin: the program's stdin (read end); absent means /dev/null
  kExecBlob,    // kExecBlobInMemfd: memfd holding encodeExecBlob()
  kExecFdCount
};

inline constexpr std::uint32_t kExecHasStdin = 1;
inline constexpr std::uint32_t kExecBlobInMemfd = 2;

/// The largest blob sent inline, after the header (a SOCK_SEQPACKET message is bounded by the
/// socket's send buffer, 208 KiB by default): a typical argv and environment, without a memfd
/// made, written, mapped, unmapped and closed for each exec.
inline constexpr std::size_t kExecInlineMax = 60 * 1024;

struct ExecRequest {
  std::uint32_t magic = kExecRequestMagic;
  std::uint32_t flags = 0;       // kExecHasStdin, kExecBlobInMemfd
  std::int32_t seq = 0;          // 1, 2, ...: stop signals for this exec carry it (sigqueue)
  std::uint32_t blob_bytes = 0;  // the inline blob's size (0 with kExecBlobInMemfd)
};
// The inline blob follows the header: its pointer table must stay 8-byte aligned.
static_assert(sizeof(ExecRequest) % alignof(char*) == 0);

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
