// Who is calling: Unix-socket callers by their uid (SO_PEERCRED), TCP callers by a bearer
// token from the token file (lines `NAME TOKEN [approver] [metrics]`), compared in constant time.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::serve {

/// A caller: "uid:N" for a Unix-socket peer, the token's NAME for a TCP one.
struct Caller {
  std::string name;
  bool approver = false;  // may answer approvals (and read /metrics)
  bool metrics = false;   // may read /metrics
};

struct Token {
  std::string name;
  std::string secret;
  bool approver = false;
  bool metrics = false;
};

/// Parses a token file. Refused: a file others can read or write, a malformed line (named by
/// line number), a duplicate name or token, a token shorter than 16 bytes.
std::expected<std::vector<Token>, std::string> loadTokenFile(const std::string& path);

/// The caller presenting `authorization` (the header's value, "Bearer TOKEN"), or nothing.
/// Every token is compared, each in constant time, so timing says nothing about which matched.
std::expected<Caller, std::string> callerForBearer(const std::vector<Token>& tokens,
                                                   std::string_view authorization);

}  // namespace sluice::serve
