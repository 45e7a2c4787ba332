// File-backed secret store: strict permission checks, values copied into one mmap'd arena
// marked MADV_DONTDUMP (kept out of core dumps) and mlock'ed where allowed (kept out of swap),
// wiped with OPENSSL_cleanse before unmapping.
#include "sluice/policy/secrets.hpp"

#include <openssl/crypto.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "sluice/policy/diagnostics.hpp"

namespace sluice::policy {
namespace {

class ArenaSecretStore final : public SecretStore {
 public:
  explicit ArenaSecretStore(const std::map<std::string, std::string>& values,
                            std::vector<std::string> paths = {})
      : paths_(std::move(paths)) {
    std::size_t total = 1;
    for (const auto& [name, value] : values) total += value.size();
    long page = ::sysconf(_SC_PAGESIZE);
    size_ = (total + static_cast<std::size_t>(page) - 1) / static_cast<std::size_t>(page) *
            static_cast<std::size_t>(page);
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      size_ = 0;
      return;
    }
    arena_ = static_cast<char*>(p);
    // Why: a crash dump of sluice must not carry credentials; swap should not either.
    ::madvise(arena_, size_, MADV_DONTDUMP);
    // Why: the sandbox's init is a clone of sluice that never execs; a child of a fork or
    // clone sees these pages zeroed, so no process in the sandbox holds a copy.
    ::madvise(arena_, size_, MADV_WIPEONFORK);
    ::mlock(arena_, size_);  // best effort: needs RLIMIT_MEMLOCK
    std::size_t off = 0;
    for (const auto& [name, value] : values) {
      std::memcpy(arena_ + off, value.data(), value.size());
      entries_.emplace(name, std::string_view(arena_ + off, value.size()));
      off += value.size();
    }
  }
  ~ArenaSecretStore() override {
    if (arena_) {
      OPENSSL_cleanse(arena_, size_);
      ::munlock(arena_, size_);
      ::munmap(arena_, size_);
    }
  }
  std::vector<std::string> secretPaths() const override { return paths_; }
  ArenaSecretStore(const ArenaSecretStore&) = delete;
  ArenaSecretStore& operator=(const ArenaSecretStore&) = delete;

  bool ok() const { return arena_ != nullptr; }

  std::optional<std::string_view> find(std::string_view name) const override {
    auto it = entries_.find(std::string(name));
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, v] : entries_) out.push_back(n);
    return out;
  }

 private:
  std::vector<std::string> paths_;
  char* arena_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::string, std::string_view> entries_;
};

// A secret goes into an HTTP header value: a byte that is not allowed there (CR and LF would
// split the header and let the value add fields of its own; NUL and other controls are
// refused by upstreams or truncate it) is refused at load time. The message names the byte
// and its position, never the value.
std::optional<std::string> fieldValueProblem(std::string_view v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto c = static_cast<unsigned char>(v[i]);
    if (c == '\t' || (c >= 0x20 && c != 0x7F)) continue;
    const char* what = c == '\r'   ? "a carriage return (CR)"
                       : c == '\n' ? "a line feed (LF)"
                       : c == 0    ? "a NUL byte"
                                   : "a control byte";
    return "the value holds " + std::string(what) + " at byte " + std::to_string(i + 1) +
           ", which an HTTP header value cannot carry (a secret file must hold one line)";
  }
  return std::nullopt;
}

// Wipes every scalar of a parsed YAML document (yaml-cpp keeps copies of the values).
void wipeYaml(const YAML::Node& n) {
  if (n.IsScalar()) {
    auto& s = const_cast<std::string&>(n.Scalar());
    wipeString(s);
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) wipeYaml(it->second);
  } else if (n.IsSequence()) {
    for (const auto& x : n) wipeYaml(x);
  }
}

std::expected<std::string, std::string> readSmallFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::unexpected("cannot read " + p.string() + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The file itself, before it is read: a regular file owned by the effective user with no
// group/other permission bits (it holds credentials).
base::Result<void> checkSecretsFile(const std::string& f) {
  struct stat st {};
  if (::stat(f.c_str(), &st) != 0) {
    const int err = errno;
    return base::fail(base::Code::kIo, "secrets file " + f + ": " + std::strerror(err), f, err);
  }
  if (!S_ISREG(st.st_mode)) {
    return base::fail(base::Code::kInvalidArgument, "secrets file " + f + " is not a regular file",
                      f);
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return base::fail(base::Code::kInvalidArgument,
                      "secrets file " + f + " has mode " + mode +
                          "; refusing a file that group or others can access (chmod 600 " + f + ")",
                      f);
  }
  if (st.st_uid != ::geteuid()) {
    return base::fail(base::Code::kInvalidArgument,
                      "secrets file " + f + " is owned by uid " + std::to_string(st.st_uid) +
                          ", not by the user running sluice (uid " + std::to_string(::geteuid()) +
                          ")",
                      f);
  }
  return {};
}

// The YAML map NAME -> {value: V} | {file: PATH} | {env: VAR}, every problem reported with
// FILE:LINE:COL and the secret's name (never a value), as the policy loader reports its own.
class SecretsReader {
 public:
  explicit SecretsReader(std::string file) : file_(std::move(file)) {}

  void readRoot(const YAML::Node& root) {
    if (!root.IsMap()) {
      errorAt(root.Mark(), "expected a mapping NAME: {value|file|env: ...}");
      return;
    }
    for (auto it = root.begin(); it != root.end(); ++it) readEntry(it->first, it->second);
  }
  void syntaxError(const YAML::Mark& m) {
    // The parser message may quote the offending line: report only the position.
    errorAt(m, "not valid YAML");
  }
  const LoadError& errors() const { return errors_; }
  std::map<std::string, std::string>& values() { return values_; }
  const std::vector<std::string>& files() const { return files_; }
  static std::string absoluteNormal(const std::filesystem::path& p) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(p, ec);
    std::string s = (ec ? p : abs).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  }

 private:
  void readEntry(const YAML::Node& key, const YAML::Node& spec) {
    const std::string name = key.Scalar();
    const std::string secret = "secret '" + name + "': ";
    if (!spec.IsMap() || spec.size() != 1) {
      error(key, secret + "expected exactly one of {value: ...}, {file: PATH}, {env: VAR}");
      return;
    }
    const YAML::Node kind_node = spec.begin()->first;
    const YAML::Node v = spec.begin()->second;
    const std::string kind = kind_node.Scalar();
    if (!v.IsScalar()) {
      error(v, secret + "'" + kind + "' must be a string");
      return;
    }
    if (kind != "value" && kind != "file" && kind != "env") {
      error(kind_node, secret + "unknown source '" + kind + "' (use value, file or env)");
      return;
    }
    if (kind == "file") files_.push_back(absoluteNormal(v.Scalar()));
    auto value = readSource(kind, v.Scalar());
    if (!value) {
      error(v, secret + value.error());
      return;
    }
    if (auto bad = fieldValueProblem(*value)) {
      wipeString(*value);
      error(v, secret + *bad);
      return;
    }
    values_[name] = std::move(*value);
  }
  // The value from its source (value, file or env), or what is wrong with the source.
  static std::expected<std::string, std::string> readSource(const std::string& kind,
                                                            const std::string& v) {
    if (kind == "value") return v;
    if (kind == "env") {
      const char* e = std::getenv(v.c_str());
      if (!e) return std::unexpected("environment variable " + v + " is not set");
      return std::string(e);
    }
    auto content = readSmallFile(v);
    if (!content) return content;
    // A file's last line break is not part of the secret.
    if (!content->empty() && content->back() == '\n') content->pop_back();
    if (!content->empty() && content->back() == '\r') content->pop_back();
    return content;
  }
  void error(const YAML::Node& at, std::string message) { errorAt(at.Mark(), std::move(message)); }
  void errorAt(const YAML::Mark& m, std::string message) {
    SourcePos pos;
    if (m.line >= 0) pos = {m.line + 1, m.column + 1};
    errors_.diagnostics.push_back({file_, pos, std::move(message)});
  }

  std::string file_;
  LoadError errors_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> files_;
};

void wipeValues(std::map<std::string, std::string>& values) {
  for (auto& [n, v] : values) wipeString(v);
}

}  // namespace

void wipeString(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

std::shared_ptr<const SecretStore> makeSecretStore(
    const std::map<std::string, std::string>& values) {
  return std::make_shared<ArenaSecretStore>(values);
}

base::Result<std::shared_ptr<const SecretStore>> loadSecretStore(
    const std::filesystem::path& path) {
  const std::string f = path.string();
  if (auto ok = checkSecretsFile(f); !ok) return std::unexpected(std::move(ok.error()));
  auto text = readSmallFile(path);
  if (!text) return base::fail(base::Code::kIo, text.error(), f);
  SecretsReader reader(f);
  try {
    YAML::Node root = YAML::Load(*text);
    wipeString(*text);
    reader.readRoot(root);
    wipeYaml(root);
  } catch (const YAML::Exception& e) {
    wipeString(*text);
    reader.syntaxError(e.mark);
  }
  if (!reader.errors().diagnostics.empty()) {
    wipeValues(reader.values());
    return std::unexpected(reader.errors().toError());
  }
  std::vector<std::string> paths = reader.files();
  paths.push_back(SecretsReader::absoluteNormal(
      std::filesystem::path(SecretsReader::absoluteNormal(path)).parent_path()));
  auto store = std::make_shared<ArenaSecretStore>(reader.values(), std::move(paths));
  wipeValues(reader.values());
  if (!store->ok())
    return base::fail(base::Code::kIo, "cannot allocate protected memory for secrets", f);
  return store;
}

std::expected<std::shared_ptr<const SecretStore>, std::string> loadSecretsFile(
    const std::filesystem::path& path) {
  auto store = loadSecretStore(path);
  if (!store) return std::unexpected(std::move(store.error().message));
  return std::move(*store);
}

std::vector<std::string> missingSecrets(const Workflow& workflow, const SecretStore* store) {
  std::vector<std::string> out;
  for (const auto& name : workflow.secretNames()) {
    if (!store || !store->find(name)) out.push_back(name);
  }
  return out;
}

std::expected<std::string, std::string> expandSecretTemplate(std::string_view tmpl,
                                                             const SecretStore& store) {
  std::string out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    auto start = tmpl.find("${secret:", i);
    if (start == std::string_view::npos) {
      out.append(tmpl.substr(i));
      break;
    }
    out.append(tmpl.substr(i, start - i));
    auto close = tmpl.find('}', start);
    if (close == std::string_view::npos) {
      wipeString(out);
      return std::unexpected("unterminated ${secret:...}");
    }
    std::string_view name = tmpl.substr(start + 9, close - start - 9);
    auto v = store.find(name);
    if (!v) {
      wipeString(out);
      return std::unexpected("secret '" + std::string(name) + "' is not in the secret store");
    }
    out.append(*v);
    i = close + 1;
  }
  return out;
}

}  // namespace sluice::policy
