// The proxy's audit rows: one connections row per upstream connection or tunnel (or refused
// connection), and one requests row per request, which RequestRecord guarantees is written on
// every path an exchange can end by, once the request has been decided.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "context.hpp"
#include "deadline.hpp"
#include "refusal.hpp"

namespace sluice::proxy {

/// A fresh connections row of `kind` for `listener`'s execution (TLS passthrough for a CONNECT,
/// none until known otherwise), decided under policy `generation` of `workflow`.
audit::ConnectionEvent connectionRow(Context& ctx, const Listener& listener,
                                     const policy::Workflow& workflow, audit::ConnectionKind kind,
                                     std::uint64_t generation);

/// Marks a connection row allowed by `rule_id`, dialled to `at`.
void allowConnection(audit::ConnectionEvent& ev, const tcp::endpoint& at,
                     const std::string& rule_id);

/// Marks a connection row allowed by `d`, dialled to `at`: would_deny (with the denial's
/// rule, reason and detail) when learn mode let it through (policy::Decision::learned).
void allowConnection(audit::ConnectionEvent& ev, const tcp::endpoint& at,
                     const policy::Decision& d);
/// Marks a connection row would_deny: learn mode let `d` (a denial) through.
void learnedRow(audit::ConnectionEvent& ev, const policy::Decision& d);

/// Marks a connection row refused by `r` (decision, rule, reason, detail): decision deny, or
/// fail with the failure as its reason when the network failed (Refusal::failure).
void denyConnection(audit::ConnectionEvent& ev, const Refusal& r);

/// Says why a connection ended early; its decision stays.
void endConnection(audit::ConnectionEvent& ev, policy::Reason reason, std::string detail);

/// Writes a connections row and counts it in `account` (Account::tally): every connections
/// row of the proxy is written here, so the receipt counts what the audit store holds.
void recordConnectionRow(Context& ctx, Account& account, audit::ConnectionEvent ev);

/// Writes a refused connection's row (denyConnection, then recordConnectionRow).
void recordDeniedConnection(Context& ctx, Account& account, audit::ConnectionEvent ev,
                            const Refusal& r);

/// Completes a connection's row with its duration and writes it (recordConnectionRow).
void finishConnection(Context& ctx, Account& account, audit::ConnectionEvent& ev,
                      Clock::time_point started);

/// The requests row of one exchange. Made once the request is decided, before any byte of it
/// goes upstream; written exactly once, by finish() or, on any path that ends the exchange
/// before that (a broken body, a client that goes away, a closed execution), by the
/// destructor with the last status known.
class RequestRecord {
 public:
  RequestRecord(const Context& ctx, const Listener& listener, Account& account,
                const policy::Workflow& workflow, std::string connection_id, std::string method,
                std::string host, std::string path, std::uint64_t generation);
  ~RequestRecord();
  RequestRecord(const RequestRecord&) = delete;
  RequestRecord& operator=(const RequestRecord&) = delete;

  /// What the policy decided (the row's decision, rule and reason until an outcome says more).
  void decided(bool allowed, const std::string& rule, policy::Reason reason);
  /// Let through by `d`: allowed, or would_deny with the denial's rule and reason when learn
  /// mode let it through (policy::Decision::learned).
  void decided(const policy::Decision& d);
  void injected(std::vector<std::string> secret_names);
  /// How the exchange ended: the status the client got and, if not the decision's, the reason.
  void outcome(int status, policy::Reason reason);
  void outcome(int status) { ev_.status = status; }
  /// The proxy refused it after the policy's decision (a limit, a check, the network): the
  /// status the client got, and the row's decision deny, or fail when the network failed.
  void refused(const Refusal& r);
  void setConnection(std::string id) { ev_.connection_id = std::move(id); }
  void setPort(std::uint16_t port) { ev_.port = port; }
  /// Where it went (or would have gone): its connection's address (`resolved_ip`, empty when
  /// none) and whether it travels outside TLS; a shadow policy decides the row there too.
  void at(const std::string& resolved_ip, bool plaintext);
  /// Records (write-ahead) that the request is about to go upstream on the row's connection:
  /// called before its first byte is written, once per attempt.
  void forwarding();
  /// The row's stamp with the shadow policy's decision of the request (decided once, at the
  /// address and TLS `at` gave; no shadow policy: none).
  const audit::PolicyStamp& shadow();
  /// Writes the row now.
  void finish();

 private:
  const Context& ctx_;
  Account& account_;
  audit::RequestEvent ev_;
  std::optional<policy::IpAddress> at_;
  bool plaintext_ = false;
  bool written_ = false;
  int attempts_ = 0;
};

}  // namespace sluice::proxy
