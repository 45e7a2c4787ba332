// The one mapping from the event enums (event_sink.hpp) to their text: what the audit store
// keeps in each column (row hashes cover it, so it never changes), what live streams send and
// what logs print. A switch per enum: a new enumerator without its text fails the build
// (-Wswitch).
#pragma once

#include <string_view>

#include "sluice/audit/event_sink.hpp"

namespace sluice::audit {

constexpr std::string_view textOf(Decision d) {
  switch (d) {
    case Decision::kAllow:
      return "allow";
    case Decision::kDeny:
      return "deny";
    case Decision::kFail:
      return "fail";
    case Decision::kWouldDeny:
      return "would_deny";
  }
  return "deny";  // not an enumerator (a bad cast): fail closed
}

constexpr std::string_view textOf(Verdict v) {
  switch (v) {
    case Verdict::kAllow:
      return "allow";
    case Verdict::kDeny:
      return "deny";
    case Verdict::kAsk:
      return "ask";
  }
  return "deny";
}

constexpr std::string_view textOf(ConnectionKind k) {
  switch (k) {
    case ConnectionKind::kConnect:
      return "connect";
    case ConnectionKind::kHttp:
      return "http";
    case ConnectionKind::kTransparent:
      return "transparent";
    case ConnectionKind::kBlocked:
      return "blocked";
    case ConnectionKind::kToken:
      return "token";
  }
  return "unknown";
}

constexpr std::string_view textOf(TlsHandling t) {
  switch (t) {
    case TlsHandling::kNone:
      return "none";
    case TlsHandling::kPassthrough:
      return "passthrough";
    case TlsHandling::kInspect:
      return "inspect";
  }
  return "unknown";
}

constexpr std::string_view textOf(ApprovalScope s) {
  switch (s) {
    case ApprovalScope::kOnce:
      return "once";
    case ApprovalScope::kExecution:
      return "execution";
    case ApprovalScope::kHost:
      return "host";
  }
  return "unknown";
}

/// Whether a connections row is counted as an attempt of its own in the allowed / denied /
/// failed totals (receipt, `sluice run`'s summary, /metrics, `audit query`): a connection
/// whose traffic the proxy reads as HTTP (an allowed plain-HTTP origin connection, inspected
/// TLS, plain HTTP inside a CONNECT tunnel or a transparent one) is counted through its
/// requests rows instead, and so is the denied companion row a refused plain-HTTP request
/// names. A learning run's would_deny is traffic let through, counted as an allow is. Every
/// other connection (a passthrough tunnel, a refused or failed connection
/// attempt, a blocked packet) counts once. reader.cpp's kAttemptConnections is the same rule
/// in SQL; RowsCountTest keeps the two together.
constexpr bool countsAsAttempt(ConnectionKind kind, Decision decision, TlsHandling tls) {
  if (kind == ConnectionKind::kHttp) return false;
  const bool through = decision == Decision::kAllow || decision == Decision::kWouldDeny;
  return !(through && (tls == TlsHandling::kInspect || tls == TlsHandling::kNone));
}

/// Whether a row's shadow decision (PolicyStamp::shadow_decision) agrees with its decision:
/// allow and fail (the policy let it through) compare as allow, deny and would_deny (learn
/// mode: the policy denied it) as deny; ask is a value of its own, agreeing with neither.
/// `audit query --shadow-diff` is the same rule in SQL (reader.cpp).
constexpr bool shadowAgrees(Decision decision, Verdict shadow) {
  const bool through = decision == Decision::kAllow || decision == Decision::kFail;
  return shadow == (through ? Verdict::kAllow : Verdict::kDeny);
}

}  // namespace sluice::audit
