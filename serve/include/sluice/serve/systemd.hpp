// What `sluice serve` takes from systemd without libsystemd: the listening sockets of socket
// activation (sd_listen_fds' protocol) and whether stderr is the journal (JOURNAL_STREAM).
#pragma once

#include <string>
#include <vector>

namespace sluice::serve {

/// A listening socket passed by systemd (sluice.socket), and its FileDescriptorName=.
struct InheritedSocket {
  int fd = -1;
  std::string name;
};

/// The sockets of socket activation: fds 3 .. 3+LISTEN_FDS-1 when LISTEN_PID is this process
/// (else none). Taken once: LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed from the
/// environment (no child inherits them) and each fd is made close-on-exec. Call while
/// single-threaded (it changes the environment).
std::vector<InheritedSocket> takeSystemdSockets();

/// True when stderr is the journal's stream: JOURNAL_STREAM ("DEV:INODE") names the very
/// file stderr is, so a redirected stderr under systemd is not mistaken for it.
bool stderrIsJournal();

}  // namespace sluice::serve
