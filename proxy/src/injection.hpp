// Credential injection: sets a rule's inject.headers (with ${secret:NAME} expanded) on an
// allowed request, and swaps placeholder tokens for real values only on requests decided by
// the placeholder's own rule. Secret values are never logged or returned; only names are.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "http_rules.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {

struct InjectionResult {
  std::vector<std::string> secrets;  ///< names of the secrets written into the request
  std::vector<std::string> touched;  ///< header names holding secret bytes (to wipe later)
  bool placeholder_leak = false;     ///< a placeholder was sent on a request of another rule
  bool secret_in_target = false;     ///< a placeholder was swapped in the path or query
  std::optional<std::string> error;  ///< a secret could not be resolved (names only)
  policy::Reason error_reason = policy::Reason::kSecretUnavailable;  ///< why, when `error`
};

/// True when `rule` would inject anything (headers, a signature) into its requests.
bool injects(const policy::Rule* rule);

/// Applies injection and placeholder swapping to `fields` for a request decided by `rule`
/// (null when no rule allowed it: then placeholders are only detected).
template <typename Fields>
InjectionResult applyInjection(Fields& fields, const policy::Rule* rule,
                               const policy::SecretStore* secrets,
                               const std::vector<Placeholder>& placeholders);

/// Overwrites the values of the named header fields in place (OPENSSL_cleanse) once the
/// request has been written, so secret bytes do not linger in freed memory.
template <typename Fields>
void wipeFields(Fields& fields, const std::vector<std::string>& names);

/// Replaces the values of the secrets named in `names`, and the values in `minted` (bearer
/// tokens minted at the proxy), wherever they appear in `fields` with kRedacted: an upstream
/// that reflects its request headers (a debug echo, an error page quoting them) must not hand
/// an injected secret to the sandbox. Returns whether any was.
template <typename Fields>
bool redactSecrets(Fields& fields, const std::vector<std::string>& names,
                   const policy::SecretStore* secrets, std::span<const std::string> minted = {});

/// True when `text` (a status line's reason phrase, say) holds the value of a secret named in
/// `names`, or one of `minted`.
bool containsSecret(std::string_view text, const std::vector<std::string>& names,
                    const policy::SecretStore* secrets, std::span<const std::string> minted = {});

inline constexpr const char* kRedacted = "[redacted by sluice]";

/// Reason code recorded when a placeholder shows up where it must not be swapped.
inline constexpr const char* kPlaceholderLeak = "placeholder_leak";

}  // namespace sluice::proxy
