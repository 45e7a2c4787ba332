// Header injection and placeholder swapping (see injection.hpp).
#include "injection.hpp"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>

namespace sluice::proxy {

bool injects(const policy::Rule* rule) { return rule && !rule->inject.headers.empty(); }

template <typename Fields>
InjectionResult applyInjection(Fields& fields, const policy::Rule* rule,
                               const policy::SecretStore* secrets,
                               const std::vector<Placeholder>& placeholders) {
  InjectionResult res;
  // Placeholders first: every header value the client sent is searched for every token.
  if (!placeholders.empty()) {
    std::vector<std::pair<std::string, std::string>> rewritten;
    std::vector<std::string> rewritten_names;
    for (const auto& f : fields) {
      std::string value(f.value());
      bool changed = false;
      for (const auto& ph : placeholders) {
        std::size_t pos = value.find(ph.token);
        if (pos == std::string::npos) continue;
        if (!rule || rule->id != ph.rule_id || !secrets) {
          res.placeholder_leak = true;  // left as is: the token is worthless elsewhere
          continue;
        }
        auto secret = secrets->find(ph.secret);
        if (!secret) {
          res.error = "secret '" + ph.secret + "' is not in the secret store";
          policy::wipeString(value);
          return res;
        }
        while (pos != std::string::npos) {
          value.replace(pos, ph.token.size(), secret->data(), secret->size());
          pos = value.find(ph.token, pos + secret->size());
        }
        changed = true;
        if (std::find(res.secrets.begin(), res.secrets.end(), ph.secret) == res.secrets.end()) {
          res.secrets.push_back(ph.secret);
        }
      }
      if (changed) {
        rewritten.emplace_back(std::string(f.name_string()), std::move(value));
      } else {
        policy::wipeString(value);
      }
    }
    for (const auto& [name, value] : rewritten) fields.erase(name);
    for (auto& [name, value] : rewritten) {
      fields.insert(name, value);
      res.touched.push_back(name);
      policy::wipeString(value);
    }
  }
  if (!injects(rule)) return res;
  if (!secrets) {
    res.error = "no secret store is configured for rule " + rule->id + "'s inject.headers";
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

template InjectionResult applyInjection<http::fields>(http::fields&, const policy::Rule*,
                                                      const policy::SecretStore*,
                                                      const std::vector<Placeholder>&);
template InjectionResult applyInjection<PmrFields>(PmrFields&, const policy::Rule*,
                                                   const policy::SecretStore*,
                                                   const std::vector<Placeholder>&);
template void wipeFields<http::fields>(http::fields&, const std::vector<std::string>&);
template void wipeFields<PmrFields>(PmrFields&, const std::vector<std::string>&);

std::vector<Placeholder> makePlaceholders(const policy::Workflow& workflow) {
  std::vector<Placeholder> out;
  for (const auto& r : workflow.rules) {
    if (r.inject.placeholder_env.empty() || r.inject.secret_names.size() != 1) continue;
    unsigned char bytes[32];
    RAND_bytes(bytes, sizeof bytes);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string token = "sluice_ph_";
    for (unsigned char b : bytes) {
      token.push_back(kHex[b >> 4]);
      token.push_back(kHex[b & 15]);
    }
    out.push_back({r.inject.placeholder_env, std::move(token), r.inject.secret_names.front(), r.id});
  }
  return out;
}

}  // namespace sluice::proxy
