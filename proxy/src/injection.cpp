// Header injection and placeholder swapping (see injection.hpp).
#include "injection.hpp"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>

#include "placeholder.hpp"
#include "sluice/base/hex.hpp"

namespace sluice::proxy {

bool injects(const policy::Rule* rule) { return rule && !rule->inject.empty(); }

template <typename Fields>
InjectionResult applyInjection(Fields& fields, const policy::Rule* rule,
                               const policy::SecretStore* secrets,
                               const std::vector<Placeholder>& placeholders) {
  InjectionResult res;
  // Placeholders first: every header value the client sent is searched for every token
  // (in place: no copy of a field unless it holds a token).
  const std::string_view rule_id = rule ? std::string_view(rule->id) : std::string_view();
  std::vector<std::string> names;  // fields holding a token we may swap
  for (const auto& f : fields) {
    auto value = f.value();
    auto hits =
        findPlaceholders(std::string_view(value.data(), value.size()), rule_id, placeholders);
    res.placeholder_leak = res.placeholder_leak || hits.leak;
    if (hits.own && std::none_of(names.begin(), names.end(), [&](const std::string& n) {
          return beast::iequals(n, f.name_string());
        })) {
      names.emplace_back(f.name_string());
    }
  }
  for (const auto& name : names) {
    // Rewrite every field of that name, in order, so same-named siblings survive.
    std::vector<std::string> values;
    auto range = fields.equal_range(name);
    for (auto it = range.first; it != range.second; ++it) values.emplace_back(it->value());
    for (auto& value : values) {
      if (auto why = swapPlaceholders(value, rule_id, secrets, placeholders, res.secrets)) {
        res.error = std::move(why);
        for (auto& v : values) policy::wipeString(v);
        return res;
      }
    }
    fields.erase(name);
    for (auto& value : values) {
      fields.insert(name, value);
      policy::wipeString(value);
    }
    res.touched.push_back(name);
  }
  if (!injects(rule)) return res;
  if (!secrets) {
    res.error = "no secret store is configured for rule " + rule->id + "'s inject";
    return res;
  }
  for (const auto& [name, tmpl] : rule->inject.headers) {
    auto value = policy::expandSecretTemplate(tmpl, *secrets);
    if (!value) {
      res.error = value.error();
      return res;
    }
    // set() replaces every field of that name: the client cannot override or add to it.
    fields.set(name, *value);
    policy::wipeString(*value);
    res.touched.push_back(name);
  }
  for (const auto& n : rule->inject.secret_names) {
    if (std::find(res.secrets.begin(), res.secrets.end(), n) == res.secrets.end()) {
      res.secrets.push_back(n);
    }
  }
  return res;
}

template <typename Fields>
void wipeFields(Fields& fields, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    for (auto it = fields.find(name); it != fields.end() && beast::iequals(it->name_string(), name);
         ++it) {
      auto v = it->value();
      if (!v.empty()) OPENSSL_cleanse(const_cast<char*>(v.data()), v.size());
    }
  }
}

template <typename Fields>
bool redactSecrets(Fields& fields, const std::vector<std::string>& names,
                   const policy::SecretStore* secrets, std::span<const std::string> minted) {
  if ((names.empty() || !secrets) && minted.empty()) return false;
  std::vector<std::string_view> values;
  for (const auto& n : names) {
    if (!secrets) break;
    if (auto v = secrets->find(n); v && !v->empty()) values.push_back(*v);
  }
  for (const auto& m : minted)
    if (!m.empty()) values.push_back(m);
  std::vector<std::string> hit;
  for (const auto& f : fields) {
    auto value = f.value();
    bool found = std::any_of(values.begin(), values.end(), [&](std::string_view v) {
      return value.find(beast::string_view(v.data(), v.size())) != beast::string_view::npos;
    });
    if (found && std::none_of(hit.begin(), hit.end(), [&](const std::string& n) {
          return beast::iequals(n, f.name_string());
        })) {
      hit.emplace_back(f.name_string());
    }
  }
  for (const auto& name : hit) {
    std::vector<std::string> rewritten;
    auto range = fields.equal_range(name);
    for (auto it = range.first; it != range.second; ++it) rewritten.emplace_back(it->value());
    for (auto& value : rewritten) {
      for (auto v : values) {
        for (auto pos = value.find(v); pos != std::string::npos; pos = value.find(v, pos)) {
          OPENSSL_cleanse(value.data() + pos, v.size());
          value.replace(pos, v.size(), kRedacted);
          pos += std::string_view(kRedacted).size();
        }
      }
    }
    wipeFields(fields, {name});
    fields.erase(name);
    for (auto& value : rewritten) {
      fields.insert(name, value);
      policy::wipeString(value);
    }
  }
  return !hit.empty();
}

bool containsSecret(std::string_view text, const std::vector<std::string>& names,
                    const policy::SecretStore* secrets, std::span<const std::string> minted) {
  if (text.empty()) return false;
  for (const auto& m : minted)
    if (!m.empty() && text.find(m) != std::string_view::npos) return true;
  if (!secrets) return false;
  for (const auto& n : names) {
    auto v = secrets->find(n);
    if (v && !v->empty() && text.find(*v) != std::string_view::npos) return true;
  }
  return false;
}

template bool redactSecrets<http::fields>(http::fields&, const std::vector<std::string>&,
                                          const policy::SecretStore*, std::span<const std::string>);
template bool redactSecrets<PmrFields>(PmrFields&, const std::vector<std::string>&,
                                       const policy::SecretStore*, std::span<const std::string>);
template InjectionResult applyInjection<http::fields>(http::fields&, const policy::Rule*,
                                                      const policy::SecretStore*,
                                                      const std::vector<Placeholder>&);
template InjectionResult applyInjection<PmrFields>(PmrFields&, const policy::Rule*,
                                                   const policy::SecretStore*,
                                                   const std::vector<Placeholder>&);
template void wipeFields<http::fields>(http::fields&, const std::vector<std::string>&);
template void wipeFields<PmrFields>(PmrFields&, const std::vector<std::string>&);

namespace {

// `n` random characters from `alphabet` (rejection sampling: no bias toward its first letters).
std::string randomText(std::size_t n, std::string_view alphabet) {
  std::string out;
  const unsigned limit = 256 - 256 % alphabet.size();
  while (out.size() < n) {
    unsigned char bytes[64];
    RAND_bytes(bytes, sizeof bytes);
    for (unsigned char b : bytes)
      if (b < limit && out.size() < n) out += alphabet[b % alphabet.size()];
  }
  return out;
}

// Stand-ins shaped like the real thing, so SDKs that check the form of a key accept them.
void addAwsPlaceholders(const policy::Rule& r, std::vector<Placeholder>& out) {
  const auto& a = *r.inject.aws_sigv4;
  constexpr std::string_view kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  constexpr std::string_view kKey =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.push_back(
      {"AWS_ACCESS_KEY_ID", "AKIA" + randomText(16, kUpper), a.access_key_id, r.id, false});
  out.push_back({"AWS_SECRET_ACCESS_KEY", randomText(40, kKey), a.secret_access_key, r.id, false});
  if (!a.session_token.empty())
    out.push_back({"AWS_SESSION_TOKEN", randomText(64, kKey), a.session_token, r.id, false});
}

// The one secret a placeholder stands in for: the one its rule's inject.headers name (the
// loader requires exactly one there; secret_names also holds keys of other inject kinds).
std::string headerSecret(const policy::Inject& inject) {
  for (const auto& [name, tmpl] : inject.headers) {
    const auto open = tmpl.find("${secret:");
    if (open == std::string::npos) continue;
    const auto close = tmpl.find('}', open);
    if (close != std::string::npos) return tmpl.substr(open + 9, close - open - 9);
  }
  return {};
}

}  // namespace

std::vector<Placeholder> makePlaceholders(const policy::Workflow& workflow) {
  std::vector<Placeholder> out;
  for (const auto& r : workflow.rules) {
    if (r.inject.aws_sigv4) addAwsPlaceholders(r, out);
    if (r.inject.placeholder_env.empty()) continue;
    std::string secret = headerSecret(r.inject);
    if (secret.empty()) continue;
    unsigned char bytes[32];
    RAND_bytes(bytes, sizeof bytes);
    std::string token = "sluice_ph_" + base::hexEncode(std::span<const std::uint8_t>(bytes));
    out.push_back({r.inject.placeholder_env, std::move(token), std::move(secret), r.id, true});
  }
  return out;
}

}  // namespace sluice::proxy
