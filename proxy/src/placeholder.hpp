// Placeholder tokens (inject.placeholder_env) in any part of a request: one detection for every
// part (header fields, the target's path and query, the body, WebSocket text frames) and one
// swap. A token is swapped for its secret only on a request decided by the rule that declared
// it; found on any other request it is a leak, which the pipeline refuses (placeholder_leak).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "relay.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {

/// What the tokens found in some request text mean for a request decided by a rule.
struct PlaceholderHits {
  bool own = false;   ///< a token of the deciding rule's own placeholder (to be swapped)
  bool leak = false;  ///< a token of another rule's placeholder (the request is refused)
  PlaceholderHits& operator|=(const PlaceholderHits& o) {
    own = own || o.own;
    leak = leak || o.leak;
    return *this;
  }
};

/// The one detection: which tokens of `placeholders` occur in `text`, judged for a request
/// decided by the rule `rule_id` ("" when no rule allowed it: every token is then a leak).
PlaceholderHits findPlaceholders(std::string_view text, std::string_view rule_id,
                                 const std::vector<Placeholder>& placeholders);

/// Every header field's name and value searched (findPlaceholders).
template <typename Fields>
PlaceholderHits findPlaceholdersInFields(const Fields& fields, std::string_view rule_id,
                                         const std::vector<Placeholder>& placeholders) {
  PlaceholderHits hits;
  for (const auto& f : fields) {
    auto name = f.name_string();
    auto value = f.value();
    hits |= findPlaceholders(std::string_view(name.data(), name.size()), rule_id, placeholders);
    hits |= findPlaceholders(std::string_view(value.data(), value.size()), rule_id, placeholders);
  }
  return hits;
}

/// Replaces every token of `rule_id`'s placeholders in `text` with its secret and adds the
/// secret's name to `names` (once). Tokens of other rules are left alone (the caller has
/// refused such a request already). An error (naming the secret, never its value) when the
/// secret is not in `secrets`.
std::optional<std::string> swapPlaceholders(std::string& text, std::string_view rule_id,
                                            const policy::SecretStore* secrets,
                                            const std::vector<Placeholder>& placeholders,
                                            std::vector<std::string>& names);

/// Replaces every occurrence of each of `values` in `text` with `replacement` (the bytes
/// replaced are wiped first). True when any was found.
bool redactValues(std::string& text, const std::vector<std::string_view>& values,
                  std::string_view replacement);

/// Searches a body that streams (too large to be read whole) for tokens of rules other than
/// `rule_id`, buffer by buffer, holding back the last (longest token - 1) bytes of each so a
/// token split across buffers is found before any byte of it leaves. Its own rule's tokens
/// pass unswapped. Shaped for relayMessage's body transform (apply(in, last): the bytes to
/// write now; nullopt: refused, the message must not be completed).
class StreamingLeakScan final : public BodyTransform {
 public:
  StreamingLeakScan(std::string rule_id, const std::vector<Placeholder>& placeholders);
  std::optional<std::string_view> apply(std::string_view in, bool last) override;

 private:
  std::string rule_id_;
  const std::vector<Placeholder>& placeholders_;
  std::size_t hold_ = 0;
  std::string window_;        // bytes held back, then the released prefix of the last call
  std::size_t released_ = 0;  // that prefix (valid until the next call, as BodyTransform says)
};

/// True when `rule_id` declared a placeholder (its requests may carry a token to swap).
bool hasPlaceholder(std::string_view rule_id, const std::vector<Placeholder>& placeholders);

}  // namespace sluice::proxy
