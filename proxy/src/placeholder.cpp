// Placeholder detection and swapping (placeholder.hpp).
#include "placeholder.hpp"

#include <openssl/crypto.h>

#include <algorithm>

namespace sluice::proxy {

namespace {

constexpr std::string_view kTokenPrefix = "sluice_ph_";  // makePlaceholders' tokens start so

}  // namespace

PlaceholderHits findPlaceholders(std::string_view text, std::string_view rule_id,
                                 const std::vector<Placeholder>& placeholders) {
  PlaceholderHits hits;
  // Every token starts with the same prefix: one search for it rules most text out (a body
  // is searched once, not once per placeholder).
  if (placeholders.empty() || text.find(kTokenPrefix) == std::string_view::npos) return hits;
  for (const auto& ph : placeholders) {
    if (text.find(ph.token) == std::string_view::npos) continue;
    if (ph.rule_id == rule_id)
      hits.own = true;
    else
      hits.leak = true;
  }
  return hits;
}

std::optional<std::string> swapPlaceholders(std::string& text, std::string_view rule_id,
                                            const policy::SecretStore* secrets,
                                            const std::vector<Placeholder>& placeholders,
                                            std::vector<std::string>& names) {
  for (const auto& ph : placeholders) {
    if (ph.rule_id != rule_id) continue;
    std::size_t pos = text.find(ph.token);
    if (pos == std::string::npos) continue;
    auto secret = secrets ? secrets->find(ph.secret) : std::nullopt;
    if (!secret) return "secret '" + ph.secret + "' is not in the secret store";
    // Room for every replacement first: a reallocation would leave secret bytes in freed
    // memory.
    std::size_t count = 0;
    for (auto p = pos; p != std::string::npos; p = text.find(ph.token, p + ph.token.size()))
      ++count;
    if (secret->size() > ph.token.size())
      text.reserve(text.size() + count * (secret->size() - ph.token.size()));
    for (; pos != std::string::npos; pos = text.find(ph.token, pos + secret->size()))
      text.replace(pos, ph.token.size(), secret->data(), secret->size());
    if (std::find(names.begin(), names.end(), ph.secret) == names.end()) names.push_back(ph.secret);
  }
  return std::nullopt;
}

bool redactValues(std::string& text, const std::vector<std::string_view>& values,
                  std::string_view replacement) {
  bool hit = false;
  for (auto v : values) {
    if (v.empty()) continue;
    for (auto pos = text.find(v); pos != std::string::npos; pos = text.find(v, pos)) {
      OPENSSL_cleanse(text.data() + pos, v.size());
      text.replace(pos, v.size(), replacement);
      pos += replacement.size();
      hit = true;
    }
  }
  return hit;
}

bool hasPlaceholder(std::string_view rule_id, const std::vector<Placeholder>& placeholders) {
  return std::any_of(placeholders.begin(), placeholders.end(),
                     [&](const Placeholder& ph) { return ph.rule_id == rule_id; });
}

}  // namespace sluice::proxy
