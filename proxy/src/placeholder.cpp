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
  if (placeholders.empty()) return hits;
  // makePlaceholders' tokens start with the same prefix: one search for it rules most text
  // out for all of them (a body is searched once, not once per placeholder). Tokens shaped
  // otherwise are searched for one by one.
  const bool prefixed = text.find(kTokenPrefix) != std::string_view::npos;
  for (const auto& ph : placeholders) {
    if (!prefixed && ph.token.starts_with(kTokenPrefix)) continue;
    if (text.find(ph.token) == std::string_view::npos) continue;
    // A signing stand-in (aws_sigv4's, not swapped) is neither on its own rule's requests:
    // the signature made with it is checked and made again instead.
    if (ph.rule_id != rule_id)
      hits.leak = true;
    else if (ph.swapped)
      hits.own = true;
  }
  return hits;
}

std::optional<std::string> swapPlaceholders(std::string& text, std::string_view rule_id,
                                            const policy::SecretStore* secrets,
                                            const std::vector<Placeholder>& placeholders,
                                            std::vector<std::string>& names) {
  for (const auto& ph : placeholders) {
    if (ph.rule_id != rule_id || !ph.swapped) continue;
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

StreamingLeakScan::StreamingLeakScan(std::string rule_id,
                                     const std::vector<Placeholder>& placeholders)
    : rule_id_(std::move(rule_id)), placeholders_(placeholders) {
  reason = policy::Reason::kPlaceholderLeak;
  detail =
      "the request body carries a placeholder token that only another rule's requests may send";
  for (const auto& ph : placeholders_) hold_ = std::max(hold_, ph.token.size());
  if (hold_ > 0) --hold_;
}

std::optional<std::string_view> StreamingLeakScan::apply(std::string_view in, bool last) {
  window_.erase(0, released_);  // what the last call handed out has been written
  window_.append(in);
  released_ = 0;
  if (findPlaceholders(window_, rule_id_, placeholders_).leak) return std::nullopt;
  // Keep the last (longest token - 1) bytes back: a token that ends in the next buffer is
  // then found before any byte of it has gone on.
  released_ = last ? window_.size() : window_.size() - std::min(hold_, window_.size());
  return std::string_view(window_.data(), released_);
}

bool hasPlaceholder(std::string_view rule_id, const std::vector<Placeholder>& placeholders) {
  return std::any_of(placeholders.begin(), placeholders.end(),
                     [&](const Placeholder& ph) { return ph.rule_id == rule_id && ph.swapped; });
}

}  // namespace sluice::proxy
