// A shadow policy (`--shadow-policy`, docs/policy.md "Shadow policy"): a candidate decided
// alongside the live policy, by the same code and with the same checks (policy::decideTunnelAt
// for a connection: its connection phase, then its address with the SSRF guard and rule cidrs;
// Matcher::decide for a request, at its connection's address and as plain text or not;
// Matcher::nameAnswer for a DNS name), as each row is written; what it says goes into the row's
// PolicyStamp and never changes what the traffic gets.
#pragma once

#include "sluice/audit/event_sink.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

/// The candidate's decision of a connections row of any kind, at the address it records as
/// dialled (`resolved_ip`) or else `refused_at` (the address a refusal was decided at, never
/// dialled): a tunnel (CONNECT, redirected, the proxy's token fetch) as the admission decides
/// it, a plain-HTTP origin connection as plain HTTP to its host and port (its requests carry
/// their own), a blocked attempt as deny (no policy carries a protocol sluice refuses).
void stampShadow(const policy::Matcher* shadow, audit::ConnectionEvent& ev,
                 const policy::IpAddress* refused_at = nullptr);

/// The candidate's decision of a request row by its host, port, method and path, at `at` (its
/// connection's address; null when it had none) and travelling as plain text or inside TLS.
void stampShadow(const policy::Matcher* shadow, audit::RequestEvent& ev,
                 const policy::IpAddress* at, bool plaintext);

/// A plain-HTTP origin connection (kind http) opened for, or refused with, a request is decided
/// by that request: its row takes the request row's shadow decision and rule (`request`), once.
void shadowOfRequest(audit::ConnectionEvent& ev, const audit::PolicyStamp& request);

/// The candidate's answer to a DNS name (allow: it would answer it).
void stampShadow(const policy::Matcher* shadow, audit::DnsEvent& ev);

/// The verdict a row's PolicyStamp records for `d`.
audit::Verdict verdictOf(const policy::Decision& d);

}  // namespace sluice::proxy
