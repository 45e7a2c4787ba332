// Secrets for credential injection: the store interface the proxy and runner use, and the
// file-backed store behind `--secrets FILE`. Values live in non-dumpable memory, are wiped
// when the store goes away, and never appear in logs, errors, audit rows or receipts.
#pragma once

#include <cstddef>
#include <expected>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/base/error.hpp"
#include "sluice/policy/workflow.hpp"

namespace sluice::policy {

/// Read access to secret values by name. Implementations are immutable after creation and
/// safe to share between threads.
class SecretStore {
 public:
  virtual ~SecretStore() = default;
  /// The value, or nullopt. The view stays valid as long as the store lives.
  virtual std::optional<std::string_view> find(std::string_view name) const = 0;
  /// Every name, sorted.
  virtual std::vector<std::string> names() const = 0;
  /// Host paths whose contents are secret: the directory of the secrets file and every `file:`
  /// source, absolute and normalised (none for an in-memory store). A sandbox may not mount
  /// them (host_mounts.hpp's mountSourceProblem `extra`).
  virtual std::vector<std::string> secretPaths() const { return {}; }
};

/// Loads a secrets file: a YAML map NAME -> {value: V} | {file: PATH} | {env: VAR}.
/// Refused unless it is a regular file owned by the effective user with no group/other
/// permission bits (mode 0600 or stricter). Errors name the file and the secret, never a value:
/// every problem of its content, one per line as FILE:LINE:COL: secret 'NAME': what
/// (LoadError::toError(): kInvalidArgument, `where` the first).
base::Result<std::shared_ptr<const SecretStore>> loadSecretStore(const std::filesystem::path& path);

/// loadSecretStore() with its error as text (the Error's message).
std::expected<std::shared_ptr<const SecretStore>, std::string> loadSecretsFile(
    const std::filesystem::path& path);

/// A store from in-memory values (tests, embedding). Values are copied into protected memory.
std::shared_ptr<const SecretStore> makeSecretStore(
    const std::map<std::string, std::string>& values);

/// Names that `workflow` references and `store` lacks (sorted); empty when all resolve.
std::vector<std::string> missingSecrets(const Workflow& workflow, const SecretStore* store);

/// Expands `${secret:NAME}` in a header template. Fails (naming the secret) if one is missing.
/// The result holds secret bytes: callers wipe it (wipeString) once it has been used.
std::expected<std::string, std::string> expandSecretTemplate(std::string_view tmpl,
                                                             const SecretStore& store);

/// Overwrites a string's bytes with zeros (OPENSSL_cleanse) and clears it.
void wipeString(std::string& s);

}  // namespace sluice::policy
