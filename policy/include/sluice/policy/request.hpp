// The canonical request: the one form of an HTTP request that the policy judges, the proxy
// forwards and the audit store records. An upstream acts on what a target *means*, not on how
// it was spelled, so every spelling that means the same path is brought to one form first
// (RFC 3986 section 6 normalisation), and every spelling whose meaning depends on who decodes
// it (an encoded '/', an encoded dot segment, a backslash) is refused rather than guessed.
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "sluice/policy/reason.hpp"

namespace sluice::policy {

/// Why a request has no canonical form (refused with 400 by the proxy).
struct RequestProblem {
  Reason reason = Reason::kInvalidTarget;  // kInvalidMethod | kInvalidTarget | kAmbiguousTarget
  std::string detail;                      // says which byte or segment, for a person
};

/// A request in canonical form.
struct HttpRequest {
  std::string method;  ///< an upper-case token ("GET", "M-SEARCH")
  std::string path;    ///< starts with '/', dot segments removed, no empty segments (but a
                       ///< trailing '/' is kept), unreserved escapes decoded, others upper-case
  std::string query;   ///< without '?', as sent (checked for control and non-ASCII bytes)
  /// `path` with the `;` parameters of every segment cut off (`/a;x/b` -> `/a/b`), as servlet
  /// containers route it; empty when no segment has parameters. Deny rules match both forms;
  /// an allow or ask rule matches such a request only with `path_params: allow` (matcher.hpp).
  std::string bare_path = {};
  bool hasPathParams() const { return !bare_path.empty(); }
  /// The origin-form target to forward: path, then '?' and the query when there is one.
  std::string target() const { return query.empty() ? path : path + "?" + query; }
};

/// Checks a method: one or more token characters (RFC 9110 5.6.2) and no lower-case letter.
/// Methods are case-sensitive and upstreams dispatch `delete` as DELETE, so a lower-case
/// spelling would slip past a rule written `DELETE`: it is refused, not upper-cased.
std::expected<std::string, RequestProblem> canonicalMethod(std::string_view method);

/// Brings an origin-form target (`/path?query`) to canonical form:
///  - refused (kAmbiguousTarget): `\` raw or encoded, an encoded `/` (%2F), a segment that is
///    `.` or `..` only once decoded (%2e%2e), a `.`/`..` segment with `;` parameters
///    (`..;/`, which Tomcat-style servers read as `..`), NUL or control bytes raw or encoded,
///    escapes that are overlong (%C0%AE) or invalid UTF-8 or a C1 control, a segment ending in
///    `.` or a space (`admin.`, `admin%20`: Windows/IIS open `admin`), a segment of dots (`...`);
///  - refused (kInvalidTarget): not starting with '/', non-ASCII bytes, a fragment, a bad
///    percent escape;
///  - normalised: escapes of unreserved characters decoded (%61 -> a), other escapes in
///    upper-case hex, empty segments dropped (`//` -> `/`), dot segments removed
///    (RFC 3986 5.2.4; `..` never climbs above the root);
///  - `;` segment parameters are kept in `path` and cut off in `bare_path`: whether they are
///    allowed depends on the rule (Matcher::decide refuses them with kAmbiguousTarget unless
///    the allowing rule says `path_params: allow`).
std::expected<HttpRequest, RequestProblem> canonicalRequest(std::string_view method,
                                                            std::string_view origin_target);

}  // namespace sluice::policy
