// The one vocabulary of reasons: every decision of the policy engine and every refusal or
// connection outcome of the proxy names one of these. The text (reasonName) is stable: it
// appears in audit rows, `X-Sluice-Reason` headers, receipts and `policy explain --json`.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::policy {

enum class Reason : std::uint8_t {
  // Decisions of the matcher.
  kAllowed,
  kDeniedByRule,
  kNoMatchingRule,
  kPortNotAllowed,
  kMethodNotAllowed,
  kPathNotAllowed,
  kPrivateAddress,        // resolved/literal address is non-global and no rule permits it
  kAddressNotInCidrs,     // rule has cidrs and the address is outside them
  kIpLiteralNeedsCidrs,   // IP-literal destination and only host-pattern rules
  kInspectionRequired,    // rule restricts methods/paths but the traffic is not inspected
  kPlaintextCredentials,  // the rule injects credentials and the request is plain http://
  kApprovalRequired,      // an ask rule matched: allowed only once an approver says so
  // Approvals (set by the proxy when an ask match is refused).
  kApprovalDenied,       // an approver said no
  kApprovalTimeout,      // no answer within the rule's ask.timeout
  kApprovalUnavailable,  // no one can answer approvals for this proxy (no approval desk)
  kExecutionEnded,       // the execution or session ended while its approval was pending
  // The canonical request (request.hpp): what the policy refuses to judge.
  kInvalidTarget,    // the request target does not parse
  kInvalidMethod,    // not an upper-case token
  kAmbiguousTarget,  // a path whose meaning depends on who decodes it
  kBodyNotAllowed,   // a body on GET/HEAD/OPTIONS/TRACE without a rule's allow_get_body
  // Set by the proxy.
  kInvalidRequest,  // malformed HTTP (framing, header syntax, broken chunked body)
  kUnsupportedTransferCoding,
  kHostMismatch,  // Host / SNI / request target does not name the CONNECT target
  kHeaderTooLarge,
  kBodyTooLarge,
  kHeaderTimeout,
  kLimitExceeded,
  kProxyLoop,
  kAuditUnavailable,
  kSecretUnavailable,
  kPlaceholderLeak,    // a placeholder of another rule in the request: refused
  kSignatureMismatch,  // inject.aws_sigv4: not signed with the sandbox's placeholder key
  kNotHttp,            // bytes in a tunnel that request rules cover are neither HTTP nor TLS
  kUpstreamError,
  kUpstreamTimeout,
  kUpstreamTls,         // the upstream's certificate or TLS handshake failed
  kTlsError,            // the proxy could not set up its side of inspection
  kTlsHandshakeFailed,  // the client's TLS handshake with the proxy failed
  kIdleTimeout,
  kClosed,  // ended by the proxy (execution over, shutdown)
  // Transparent capture: sent out of the sandbox by something other than TCP (which is
  // redirected to the proxy) or DNS to 127.0.0.53, e.g. UDP, QUIC, ICMP; rejected in the
  // sandbox's netns and recorded from the kernel's log (docs/sandbox.md).
  kProtocolNotAllowed,
  // A bearer token the proxy mints (inject.oauth2, inject.google_service_account) could not be
  // had from its token endpoint.
  kTokenUnavailable,
  // A live policy update (or reload) refused what an approver let through while it waited, or
  // cut a tunnel open under the policy before.
  kPolicyChanged,
};

/// The stable text of a reason.
std::string_view reasonName(Reason r);

}  // namespace sluice::policy
