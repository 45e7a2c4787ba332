// inject.oauth2 and inject.google_service_account (inject_tokens.hpp).
#include "inject_tokens.hpp"

#include <memory>

#include "sluice/policy/explain.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/target.hpp"

namespace sluice::policy {

namespace {

SourcePos posOf(const YAML::Node& n) {
  if (n.Mark().line < 0) return {};
  return {n.Mark().line + 1, n.Mark().column + 1};
}

// A scalar string of a grant, without line breaks (they would end up in a request).
std::optional<std::string> text(const YAML::Node& n, const std::string& what,
                                const InjectParseContext& kit) {
  if (!n.IsScalar() || n.Scalar().empty()) {
    kit.error(n, what + " must be a non-empty string");
    return std::nullopt;
  }
  if (n.Scalar().find_first_of("\r\n") != std::string::npos) {
    kit.error(n, what + " must not contain line breaks");
    return std::nullopt;
  }
  return n.Scalar();
}

// A required key of `n`; an error naming it when absent.
YAML::Node required(const YAML::Node& n, const char* key, const std::string& what,
                    const InjectParseContext& kit) {
  auto v = n[key];
  if (!v) kit.error(n, what + " needs '" + key + "'");
  return v;
}

// The token endpoint: an http(s) URL without secrets, query or fragment.
std::optional<std::string> tokenUrl(const YAML::Node& n, const std::string& what,
                                    const InjectParseContext& kit) {
  auto s = text(n, what, kit);
  if (!s) return std::nullopt;
  auto url = parseUrl(*s);
  if (!url) {
    kit.error(n, what + " '" + *s + "' is not a URL: " + url.error());
  } else if (url->scheme != "https" && url->scheme != "http") {
    kit.error(n, what + " '" + *s + "' must be an http:// or https:// URL");
  } else if (s->find("${") != std::string::npos) {
    kit.error(n, what + " must not hold ${...} references (the URL is not a secret)");
  } else {
    return s;
  }
  return std::nullopt;
}

void parseOAuth2(const YAML::Node& n, Rule& r, std::set<std::string>& names,
                 const InjectParseContext& kit) {
  if (!kit.check_map(n, "inject.oauth2",
                     {"token_url", "client_id", "client_secret", "scope", "audience", "auth"}))
    return;
  OAuth2Grant g;
  if (auto v = required(n, "token_url", "inject.oauth2", kit)) {
    g.token_url_pos = posOf(v);
    if (auto s = tokenUrl(v, "inject.oauth2.token_url", kit)) g.token_url = *s;
  }
  for (auto [key, out] :
       {std::pair{"client_id", &g.client_id}, std::pair{"client_secret", &g.client_secret}}) {
    auto v = required(n, key, "inject.oauth2", kit);
    if (!v) continue;
    if (auto s = text(v, std::string("inject.oauth2.") + key, kit)) {
      kit.secret_template(v, *s, names);
      *out = *s;
    }
  }
  if (auto v = n["scope"]) g.scope = text(v, "inject.oauth2.scope", kit).value_or("");
  if (auto v = n["audience"]) g.audience = text(v, "inject.oauth2.audience", kit).value_or("");
  if (auto v = n["auth"]) {
    auto s = text(v, "inject.oauth2.auth", kit);
    if (s == "body" || s == "basic") {
      g.auth_in_body = s == "body";
    } else if (s) {
      kit.error(v, "inject.oauth2.auth must be 'basic' or 'body' (got '" + *s + "')");
    }
  }
  r.inject.oauth2 = std::move(g);
}

// `key: ${secret:NAME}`: exactly one reference and nothing else (the whole value is the key
// file's JSON).
void parseServiceAccountKey(const YAML::Node& v, GoogleServiceAccount& g,
                            std::set<std::string>& names, const InjectParseContext& kit) {
  auto s = text(v, "inject.google_service_account.key", kit);
  if (!s) return;
  std::set<std::string> own;
  kit.secret_template(v, *s, own);
  if (own.size() != 1 || !s->starts_with("${secret:") || s->back() != '}' ||
      s->find("${", 1) != std::string::npos) {
    kit.error(v,
              "inject.google_service_account.key must be exactly one ${secret:NAME} (a secret "
              "holding the service account's JSON key file)");
    return;
  }
  names.insert(own.begin(), own.end());
  g.key = *s;
}

void parseServiceAccount(const YAML::Node& n, Rule& r, std::set<std::string>& names,
                         const InjectParseContext& kit) {
  if (!kit.check_map(n, "inject.google_service_account", {"key", "scopes", "token_url"})) return;
  GoogleServiceAccount g;
  if (auto v = required(n, "key", "inject.google_service_account", kit))
    parseServiceAccountKey(v, g, names, kit);
  if (auto v = required(n, "scopes", "inject.google_service_account", kit)) {
    if (!v.IsSequence() || v.size() == 0) {
      kit.error(v, "inject.google_service_account.scopes must be a non-empty list of scopes");
    } else {
      for (const auto& s : v) {
        auto scope = text(s, "a scope", kit);
        if (scope && scope->find(' ') != std::string::npos) {
          kit.error(s, "a scope must not contain spaces (list each scope on its own)");
        } else if (scope) {
          g.scopes.push_back(*scope);
        }
      }
    }
  }
  if (auto v = n["token_url"]) {
    g.token_url_pos = posOf(v);
    if (auto s = tokenUrl(v, "inject.google_service_account.token_url", kit)) g.token_url = *s;
  } else {
    g.token_url_pos = posOf(n);
  }
  r.inject.google_service_account = std::move(g);
}

// The token minted goes in Authorization: a header template of that name would fight it.
void checkNoAuthorizationHeader(const YAML::Node& inject, const Rule& r,
                                const InjectParseContext& kit) {
  for (const auto& [name, value] : r.inject.headers) {
    std::string lower = name;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "authorization")
      kit.error(inject["headers"],
                "inject.headers sets Authorization, which the token minted by inject.oauth2 or "
                "inject.google_service_account sets; drop one");
  }
}

// The one question for a token endpoint: what `policy explain` says of a POST to it.
std::optional<std::string> endpointProblem(const Matcher& m, const std::string& url) {
  auto ex = explain(m, ExplainQuery{url, "", "POST", ""});
  if (!ex) return "it cannot be decided: " + ex.error();
  const Decision& d = ex->decision;
  if (d.allowed) return std::nullopt;
  if (d.ask)
    return "ask rule " + d.rule_id +
           " matches it, and the proxy's own token fetch cannot wait for an approver";
  return std::string(reasonName(d.reason)) + ": " + (d.detail.empty() ? d.nearest_miss : d.detail);
}

}  // namespace

void parseInjectTokens(const YAML::Node& inject, Rule& r, std::set<std::string>& names,
                       const InjectParseContext& kit) {
  auto oauth2 = inject["oauth2"];
  auto google = inject["google_service_account"];
  if (oauth2) parseOAuth2(oauth2, r, names, kit);
  if (google) parseServiceAccount(google, r, names, kit);
  if (oauth2 && google)
    kit.error(google,
              "inject.oauth2 and inject.google_service_account both mint the Authorization "
              "token; a rule has at most one");
  if (oauth2 || google) checkNoAuthorizationHeader(inject, r, kit);
}

std::vector<Diagnostic> checkTokenEndpoints(const Workflow& w, const std::string& file) {
  std::vector<Diagnostic> out;
  std::shared_ptr<const Matcher> matcher;  // compiled only for a workflow that mints tokens
  for (const auto& r : w.rules) {
    const auto& in = r.inject;
    if (!in.mintsToken()) continue;
    if (!matcher) matcher = Matcher::compile(std::make_shared<const Workflow>(w));
    const bool oauth2 = in.oauth2.has_value();
    const std::string& url = oauth2 ? in.oauth2->token_url : in.google_service_account->token_url;
    const SourcePos pos =
        oauth2 ? in.oauth2->token_url_pos : in.google_service_account->token_url_pos;
    // The grant carries the client's credentials: in clear only when the rule says so.
    if (url.starts_with("http://") && !r.allow_plaintext_credentials)
      out.push_back({file, pos,
                     "token endpoint " + url + " of rule '" + r.id +
                         "' is plain http://: the grant would send its credentials in clear; "
                         "use https:// or set allow_plaintext_credentials: true"});
    if (auto problem = endpointProblem(*matcher, url))
      out.push_back({file, pos,
                     "token endpoint " + url + " of rule '" + r.id + "' (inject." +
                         (oauth2 ? "oauth2" : "google_service_account") +
                         ") is not allowed by a rule of workflow '" + w.name + "': " + *problem +
                         "; add a rule that allows POST to it"});
  }
  return out;
}

}  // namespace sluice::policy
