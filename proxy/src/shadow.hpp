// A shadow policy (`--shadow-policy`, docs/policy.md "Shadow policy"): a candidate decided
// alongside the live policy, by the same code (policy::decideTunnel for a tunnel,
// Matcher::decide for a request, Matcher::nameAnswer for a DNS name), as each row is written;
// what it says goes into the row's PolicyStamp and never changes what the traffic gets.
#pragma once

#include "sluice/audit/event_sink.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

/// The candidate's decision of a tunnel row (CONNECT or redirected) by its host and port;
/// other kinds (plain HTTP origin links, blocked attempts) are left unstamped: their requests,
/// or nothing the policy decides, carry the decision.
void stampShadow(const policy::Matcher* shadow, audit::ConnectionEvent& ev);

/// The candidate's decision of a request row by its host, port, method and path.
void stampShadow(const policy::Matcher* shadow, audit::RequestEvent& ev);

/// The candidate's answer to a DNS name (allow: it would answer it).
void stampShadow(const policy::Matcher* shadow, audit::DnsEvent& ev);

/// The verdict a row's PolicyStamp records for `d`.
audit::Verdict verdictOf(const policy::Decision& d);

}  // namespace sluice::proxy
