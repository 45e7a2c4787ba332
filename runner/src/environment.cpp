// The sandboxed program's environment (see environment.hpp).
#include "sluice/runner/environment.hpp"

#include <set>

namespace sluice::runner {

std::expected<std::vector<std::string>, std::string> buildEnvironment(
    const std::vector<std::string>& extra, bool network_proxy) {
  std::vector<std::string> env = {std::string("PATH=") + kSandboxPath, "HOME=/work", "TMPDIR=/tmp",
                                  "LANG=C.UTF-8", "USER=sandbox", "LOGNAME=sandbox"};
  if (network_proxy) {
    for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                          "all_proxy"})
      env.push_back(std::string(k) + "=http://127.0.0.1:3128");
    env.push_back("NO_PROXY=");
    env.push_back("no_proxy=");
  }
  std::set<std::string> fixed;
  for (const std::string& kv : env) fixed.insert(kv.substr(0, kv.find('=')));
  std::set<std::string> seen;
  for (const std::string& kv : extra) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return std::unexpected("--env " + kv + ": expected NAME=VALUE");
    const std::string name = kv.substr(0, eq);
    bool ok = !(name[0] >= '0' && name[0] <= '9');
    for (char c : name)
      ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    if (!ok) return std::unexpected("--env " + kv + ": '" + name + "' is not a valid variable name");
    if (kv.find('\0') != std::string::npos)
      return std::unexpected("--env " + name + ": value contains a NUL byte");
    if (fixed.contains(name))
      return std::unexpected("--env " + name + ": fixed by sluice, cannot be replaced");
    if (!seen.insert(name).second) return std::unexpected("--env " + name + ": given twice");
    env.push_back(kv);
  }
  return env;
}

}  // namespace sluice::runner
