// The typed form of one workflow policy file. YAML is parsed once into these structs and
// validated; the matcher is compiled from them and never sees YAML.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/policy/diagnostics.hpp"
#include "sluice/policy/ip_address.hpp"

namespace sluice::policy {

/// deny beats ask beats allow; an ask rule matches like an allow rule, then waits for an approver.
enum class Action : std::uint8_t { kAllow, kDeny, kAsk };
enum class TlsMode : std::uint8_t { kPassthrough, kInspect };
enum class NetworkMode : std::uint8_t { kNone, kProxy };

std::string_view actionName(Action a);
std::string_view tlsModeName(TlsMode t);
std::string_view networkModeName(NetworkMode n);

/// A host pattern: `example.com` (exact), `*.example.com` (subdomains only) or `re:REGEX`.
struct HostPattern {
  enum class Kind : std::uint8_t { kExact, kSuffix, kRegex };
  Kind kind = Kind::kExact;
  std::string value;  // exact: normalised host; suffix: "example.com"; regex: the RE2 text
  std::string text;   // as written
  SourcePos pos;
};

/// An inclusive port range; a single port has lo == hi.
struct PortRange {
  std::uint16_t lo = 0;
  std::uint16_t hi = 0;
  bool contains(std::uint16_t p) const { return p >= lo && p <= hi; }
};

/// A path pattern: glob (`/v1/*`; `*` matches any run of characters, `?` one) or `re:RE2`.
struct PathPattern {
  bool regex = false;
  std::string pattern;  // without the `re:` prefix
  std::string text;     // as written
};

/// `inject.aws_sigv4`: the secrets (names) holding the real AWS credentials; the proxy checks
/// a request's SigV4 signature made with the sandbox's placeholders and signs it again with these.
struct AwsSigV4 {
  std::string access_key_id;      // secret names
  std::string secret_access_key;  //
  std::string session_token;      // empty when absent
  SourcePos pos;
};

/// `inject.hmac`: a signature over a message template, computed per request by the proxy
/// (policy/src/inject_hmac.cpp; docs/credentials.md "HMAC signatures").
struct HmacSigning {
  enum class Algorithm { kSha256, kSha512 };
  enum class Encoding { kHex, kBase64 };
  std::string key_secret;  // NAME of the `${secret:NAME}` key
  Algorithm algorithm = Algorithm::kSha256;
  Encoding encoding = Encoding::kHex;
  std::string header;            // where the signature goes
  std::string prefix;            // written before the encoded signature ("sha256=")
  std::string message;           // ${method} ${path} ${query} ${timestamp} ${body_sha256} ${body}
  std::string timestamp_header;  // set to ${timestamp} (Unix seconds) when given
  bool needs_body = false;       // the message names ${body} or ${body_sha256}
};

/// `inject.oauth2`: a bearer token the proxy gets with the client-credentials grant (RFC 6749
/// 4.4). client_id and client_secret are templates that may hold `${secret:NAME}`.
struct OAuth2Grant {
  std::string token_url;  // http(s)://host[:port]/path
  SourcePos token_url_pos;
  std::string client_id;
  std::string client_secret;
  std::string scope;          // empty when absent
  std::string audience;       // empty when absent
  bool auth_in_body = false;  // `auth: body`: credentials as form fields, not HTTP Basic
};

/// `inject.google_service_account`: a bearer token the proxy gets with a JWT it signs with the
/// service account's key (RFC 7523), the key file's JSON held by the secret `key` names.
struct GoogleServiceAccount {
  std::string key;  // template: `${secret:NAME}`
  std::vector<std::string> scopes;
  std::string token_url = "https://oauth2.googleapis.com/token";
  SourcePos token_url_pos;
};

/// What the proxy adds to a request its rule allows: headers (`${secret:NAME}` templates),
/// a placeholder variable, a SigV4 re-signing, an HMAC signature or a minted bearer token.
struct Inject {
  std::vector<std::pair<std::string, std::string>> headers;
  std::string placeholder_env;            // empty when absent
  std::optional<AwsSigV4> aws_sigv4;      // policy/src/inject_aws_sigv4.cpp
  std::vector<std::string> secret_names;  // every NAME referenced, sorted, unique
  // Tokens minted at the proxy (inject_tokens.cpp); at most one of the two.
  std::optional<OAuth2Grant> oauth2;
  std::optional<GoogleServiceAccount> google_service_account;
  std::optional<HmacSigning> hmac;  // inject.hmac
  bool mintsToken() const { return oauth2 || google_service_account; }
  bool empty() const {
    return headers.empty() && placeholder_env.empty() && !mintsToken() && !aws_sigv4 && !hmac;
  }
};

struct Rule {
  std::string id;
  Action action = Action::kAllow;
  std::vector<HostPattern> hosts;
  std::vector<PortRange> ports;  // defaults to [80, 443]
  bool ports_given = false;
  std::vector<Cidr> cidrs;
  bool allow_private = false;
  TlsMode tls = TlsMode::kPassthrough;
  std::vector<std::string> methods;  // upper-case; empty = any
  std::vector<PathPattern> paths;    // empty = any
  /// `paths_case: insensitive`: `paths` match without regard to ASCII case (for upstreams that
  /// route `/V1/Admin` to `/v1/admin`). `paths_case_given`: the key was written (either value).
  bool paths_case_insensitive = false;
  bool paths_case_given = false;
  /// `path_params: allow` (allow and ask rules): a request whose path has `;` parameters may be
  /// matched, with the parameters cut off; without it such a request is refused as ambiguous.
  bool path_params_allowed = false;
  Inject inject;
  bool allow_plaintext_credentials = false;
  /// A GET, HEAD, OPTIONS or TRACE request may carry a body (refused otherwise: an upstream
  /// that ignores such a body reads it as the next request).
  bool allow_get_body = false;
  /// action: ask: how long a match waits for an approver (`ask: {timeout: 60s}`), then it is
  /// refused with approval_timeout.
  std::chrono::milliseconds ask_timeout{std::chrono::seconds(60)};
  SourcePos pos;

  /// True when the rule constrains what only request-level inspection can see.
  bool hasRequestConditions() const { return !methods.empty() || !paths.empty(); }
  bool allowsPort(std::uint16_t p) const;
  std::string portsText() const;  // "[80, 443]" or "[8000-8100]"
};

/// A host path shown read-only in the sandbox (`sandbox.mounts`); both absolute and
/// normalised, checked by host_mounts.hpp's rules.
struct HostMount {
  std::string source;  // on the host
  std::string target;  // in the sandbox
};

/// Resource limits for one execution (DESIGN.md `sandbox:`).
struct SandboxLimits {
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds cpu_time{std::chrono::seconds(20)};
  std::uint64_t memory = 512ull << 20;
  std::uint64_t pids = 64;
  std::uint64_t output = 1ull << 20;
  std::uint64_t disk = 100ull << 20;
  std::uint64_t file_size = 0;  // 0 = same as disk
  std::uint64_t open_files = 256;
  NetworkMode network = NetworkMode::kProxy;
  /// Prepared sandboxes `sluice serve` keeps for this workflow; unset: serve's --pool.
  std::optional<std::uint64_t> pool;
  /// Read-only host paths added to the sandbox, in the policy's order.
  std::vector<HostMount> mounts;
};

/// Per-execution egress limits (DESIGN.md `egress.limits`). Always > 0 (the loader refuses 0).
struct EgressLimits {
  std::uint64_t max_connections = 32;
  std::uint64_t max_bytes_out = 10ull << 20;
  std::uint64_t max_bytes_in = 200ull << 20;
  std::uint64_t max_requests = 1000;
  /// Queries sluice's DNS answers for one execution; later ones get REFUSED.
  std::uint64_t max_dns_queries = 1000;
};

struct Workflow {
  std::string name;
  std::string description;
  SandboxLimits sandbox;
  std::vector<Rule> rules;
  EgressLimits limits;

  std::vector<Diagnostic> warnings;  // load-time notes `policy check` prints (not errors)
  std::string source_path;           // file it was loaded from
  std::string yaml_text;             // exact text, for the audit store
  std::string sha256;                // hex SHA-256 of yaml_text

  const Rule* findRule(std::string_view id) const;
  /// Every secret name any rule references, sorted and unique.
  std::vector<std::string> secretNames() const;
};

}  // namespace sluice::policy
