// What the end-to-end fixtures that run `sluice run` against a NetnsUpstream share: the names
// the proxy resolves (an /etc/hosts of the run's own, bound in a private mount namespace), the
// receipt printed with --json, and numbers read back from the audit store with `sluice audit
// sql`.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "proc_scan.hpp"

namespace sluice::testing {

/// Writes DIR/hosts (localhost and the line `names`, e.g. "10.0.0.2 a.test b.test") and
/// DIR/with-hosts.sh, which binds it over /etc/hosts and execs its arguments. Returns the
/// prefix that runs a command that way in a mount namespace of its own (nothing of the host
/// changes): "unshare -m --propagation private DIR/with-hosts.sh ".
inline std::string withHosts(const std::filesystem::path& dir, const std::string& names) {
  std::ofstream(dir / "hosts") << "127.0.0.1 localhost\n" << names << "\n";
  std::ofstream(dir / "with-hosts.sh") << "#!/bin/sh\nmount --bind '" << (dir / "hosts").string()
                                       << "' /etc/hosts || exit 97\nexec \"$@\"\n";
  std::filesystem::permissions(dir / "with-hosts.sh", std::filesystem::perms::owner_all);
  return "unshare -m --propagation private " + (dir / "with-hosts.sh").string() + " ";
}

/// The receipt `sluice run --json` printed after whatever came before it; discarded JSON when
/// there is none.
inline nlohmann::json parseReceipt(const std::string& out) {
  return nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
}

/// `sluice audit sql --db DB --format csv Q`: the CSV, header first.
inline std::string auditSql(const std::string& db, const std::string& q) {
  return shellOutput(std::string(SLUICE_BINARY) + " audit sql --db " + db + " --format csv \"" + q +
                     "\"")
      .second;
}

/// The one number a `SELECT count(*) ...` returns; -1 when there is none.
inline long auditCount(const std::string& db, const std::string& q) {
  const std::string out = auditSql(db, q);
  const auto nl = out.find('\n');
  return nl == std::string::npos ? -1 : std::atol(out.c_str() + nl + 1);
}

/// `n` characters drawn from `alphabet` (a test secret's real value, unique to the run).
inline std::string randomText(std::size_t n, std::string_view alphabet = "0123456789abcdef") {
  std::random_device rd;
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += alphabet[rd() % alphabet.size()];
  return s;
}

/// Where any of `values` (a secret's real value) can be read on the host after a `sluice run`
/// whose files are in `dir`: sluice's stdout and stderr, dir/receipt.json, every file under
/// dir/out (the sandbox's outputs) and the audit store dir/audit.db with its WAL and SHM.
/// Returns those places; empty when the values are nowhere.
inline std::vector<std::string> whereFound(const std::vector<std::string>& values, const Outcome& o,
                                           const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  auto check = [&](const std::string& where, const std::string& bytes) {
    for (const std::string& v : values)
      if (bytes.find(v) != std::string::npos) found.push_back(where);
  };
  check("sluice stdout", o.out);
  check("sluice stderr", o.err);
  check("receipt", slurp(dir / "receipt.json"));
  if (fs::is_directory(dir / "out"))
    for (const auto& e : fs::recursive_directory_iterator(dir / "out"))
      if (e.is_regular_file()) check(e.path().string(), slurp(e.path()));
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("audit.db"))
      check(e.path().string(), slurp(e.path()));
  return found;
}

}  // namespace sluice::testing
