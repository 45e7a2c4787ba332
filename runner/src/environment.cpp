// The sandboxed program's environment (see environment.hpp).
#include "sluice/runner/environment.hpp"

#include <set>

namespace sluice::runner {
namespace {

// Where the sandbox's CA bundle is (runner/src/mounts.cpp binds or writes it there).
constexpr const char* kSandboxCaBundle = "/etc/ssl/certs/ca-certificates.crt";

}  // namespace

std::expected<std::vector<std::string>, std::string> buildEnvironment(
    const std::vector<std::string>& extra, bool network_proxy) {
  std::vector<std::string> env = {std::string("PATH=") + kSandboxPath,
                                  "HOME=/work",
                                  "TMPDIR=/tmp",
                                  "LANG=C.UTF-8",
                                  "USER=sandbox",
                                  "LOGNAME=sandbox"};
  // Every TLS stack finds the sandbox's CA bundle (the host's, or the caller's merged bundle
  // with the TLS-inspection CA) through the same variables, whether or not there is a CA, so a
  // program behaves the same in every run. The sandbox has no hashed /etc/ssl/certs directory:
  // without SSL_CERT_FILE OpenSSL-based clients (Python) would find no trust anchors at all.
  for (const char* k : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                        "NODE_EXTRA_CA_CERTS", "PIP_CERT", "GIT_SSL_CAINFO", "AWS_CA_BUNDLE"})
    env.push_back(std::string(k) + "=" + kSandboxCaBundle);
  if (network_proxy) {
    for (const char* k :
         {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"})
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
      ok = ok &&
           ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    if (!ok)
      return std::unexpected("--env " + kv + ": '" + name + "' is not a valid variable name");
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
