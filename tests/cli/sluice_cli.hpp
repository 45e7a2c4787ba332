// Running the built `sluice` binary from a CLI test: its exit status and what it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace sluice::testing {

struct CliRun {
  int status = -1;
  std::string out;
};

/// Runs `sluice ARGS REDIRECT` (ARGS already shell-quoted; by default stderr joins stdout).
inline CliRun sluice(const std::string& args, const std::string& redirect = "2>&1") {
  const std::string cmd = std::string(SLUICE_BINARY) + " " + args + " " + redirect;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace sluice::testing
