// Token file and bearer-token checks (auth.hpp).
#include "auth.hpp"

#include <openssl/crypto.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace sluice::serve {
namespace {
constexpr const char* kLineForm = "NAME TOKEN [approver] [metrics]";
}  // namespace

std::expected<std::vector<Token>, std::string> loadTokenFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::unexpected(path + ": cannot read");
  if ((st.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 0777);
    return std::unexpected(path + ": readable or writable by others (mode " + mode +
                           "); chmod 600 it");
  }
  std::ifstream in(path);
  if (!in) return std::unexpected(path + ": cannot read");
  std::vector<Token> out;
  std::set<std::string> names, secrets;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Token t;
    std::string flag;
    words >> t.name >> t.secret;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    if (t.name.empty()) continue;  // blank line
    if (t.secret.empty()) return std::unexpected(where + "expected " + kLineForm);
    // An unknown word is not echoed: a line written in the wrong order puts the token there.
    for (int word = 3; words >> flag; ++word) {
      bool& mark = flag == "approver" ? t.approver : t.metrics;
      if ((flag != "approver" && flag != "metrics") || mark)
        return std::unexpected(where + "word " + std::to_string(word) +
                               " is not 'approver' or 'metrics', or repeats one (expected " +
                               kLineForm + ")");
      mark = true;
    }
    if (t.secret.size() < 16)
      return std::unexpected(where + "token of '" + t.name + "' is shorter than 16 bytes");
    if (!names.insert(t.name).second)
      return std::unexpected(where + "name '" + t.name + "' appears twice");
    if (!secrets.insert(t.secret).second)
      return std::unexpected(where + "token of '" + t.name + "' is also another name's");
    out.push_back(std::move(t));
  }
  if (out.empty()) return std::unexpected(path + ": no tokens");
  return out;
}

std::expected<Caller, std::string> callerForBearer(const std::vector<Token>& tokens,
                                                   std::string_view authorization) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size() || authorization.substr(0, kScheme.size()) != kScheme)
    return std::unexpected("missing 'Authorization: Bearer TOKEN'");
  std::string_view presented = authorization.substr(kScheme.size());
  const Token* match = nullptr;
  for (const Token& t : tokens) {
    // Equal lengths compared with CRYPTO_memcmp; a length mismatch is not secret (tokens are
    // random strings of a published minimum length).
    bool same = t.secret.size() == presented.size() &&
                CRYPTO_memcmp(t.secret.data(), presented.data(), presented.size()) == 0;
    if (same) match = &t;
  }
  if (!match) return std::unexpected("unknown token");
  return Caller{match->name, match->approver, match->metrics};
}

}  // namespace sluice::serve
