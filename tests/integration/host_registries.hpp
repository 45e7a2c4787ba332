// The package registries the host itself is configured with, for end-to-end tests that install
// a real package inside `sluice run`: the registry is read from the host's own configuration
// (`npm config get registry`: no registry host is named in the tests), checked reachable, and
// given a policy rule (with cidrs and allow_private where this machine reaches it at a
// non-global address, as for any private mirror).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proc_scan.hpp"

namespace sluice::testing {

// The host's npm registry URL, host and port, and the policy rule that reaches it.
struct NpmRegistry {
  std::string url, host, port, rule;
};

/// The host, port (the scheme's default when the URL names none) and path ("/..." or "") of a
/// registry or mirror URL. Returns "" and fills them, or why the URL cannot be used.
struct UrlParts {
  std::string host, port, path;
};
inline std::string splitUrl(const std::string& url, UrlParts& parts) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "no scheme://";
  const std::string rest = url.substr(scheme_end + 3);
  const auto slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  // A URL with user:password@ is a credential: it must not reach a policy file or a log.
  if (authority.find('@') != std::string::npos) return "it carries credentials";
  const auto colon = authority.rfind(':');
  parts.host = authority.substr(0, colon);
  parts.port = colon != std::string::npos ? authority.substr(colon + 1)
                                          : (url.starts_with("https://") ? "443" : "80");
  parts.path = slash != std::string::npos ? rest.substr(slash) : "";
  return "";
}

/// Reads the registry from the host's own npm configuration and checks the host can reach it
/// (`npm view`, with a throw-away cache). Returns "" and fills `reg`, or why it cannot be used.
inline std::string hostNpmRegistry(const std::filesystem::path& dir, NpmRegistry& reg) {
  auto [rc, url] = shellOutput("npm config get registry 2>/dev/null");
  while (!url.empty() && (url.back() == '\n' || url.back() == '\r')) url.pop_back();
  if (rc != 0 || url.find("://") == std::string::npos) return "npm has no registry configured";
  UrlParts parts;
  if (const std::string why = splitUrl(url, parts); !why.empty())
    return "npm's registry URL cannot be used: " + why;
  reg.url = url;
  reg.host = parts.host;
  reg.port = parts.port;
  auto [vrc, vout] = shellOutput("timeout 60 npm view is-number@7.0.0 version --cache " +
                                 (dir / "host-npm-cache").string());
  std::filesystem::remove_all(dir / "host-npm-cache");
  if (vrc != 0 || vout.find("7.0.0") == std::string::npos)
    return "the host's npm registry is unreachable from this machine: " + vout;
  return "";
}

/// `rule` (allowing `host`:`port`), and where this machine reaches the host at a non-global
/// address (a mirror in a test network: the SSRF guard refuses those, `policy explain --ip`
/// says so), those addresses as its cidrs with allow_private, as for any private mirror.
inline std::string reachableRule(std::string rule, const std::string& host, const std::string& port,
                                 const std::filesystem::path& dir) {
  // The probe names only host and port: its question is the address, not a request.
  std::ofstream(dir / "probe.yaml")
      << "apiVersion: sluice/v1\nkind: Workflow\nname: probe\negress:\n  rules:\n"
      << "    - {id: probe, action: allow, hosts: [\"" << host << "\"], ports: [" << port << "]}\n";
  auto [rc, addrs] = shellOutput("getent ahosts " + host + " | awk '{print $1}' | sort -u");
  std::istringstream in(addrs);
  std::vector<std::string> cidrs;
  bool guarded = false;
  for (std::string a; std::getline(in, a);) {
    if (a.empty()) continue;
    cidrs.push_back(a.find(':') == std::string::npos ? a + "/32" : a + "/128");
    auto [erc, why] = shellOutput(std::string(SLUICE_BINARY) + " policy explain --policy " +
                                  (dir / "probe.yaml").string() + " --connect " + host + ":" +
                                  port + " --ip " + a);
    guarded = guarded || why.find("private_address") != std::string::npos;
  }
  if (!guarded) return rule;
  rule += "      allow_private: true\n      cidrs: [";
  for (std::size_t i = 0; i < cidrs.size(); ++i) rule += (i ? ", \"" : "\"") + cidrs[i] + "\"";
  return rule + "]\n";
}

inline std::string npmRegistryRule(const NpmRegistry& reg, const std::filesystem::path& dir) {
  return reachableRule("    - id: npm-registry\n      action: allow\n      hosts: [\"" + reg.host +
                           "\"]\n      ports: [" + reg.port + "]\n",
                       reg.host, reg.port, dir);
}

}  // namespace sluice::testing
