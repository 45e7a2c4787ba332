// The one admission of a tunnel or a request. Every CONNECT, every redirected connection and
// every HTTP request (fresh, on a reused or pipelined connection, inside a tunnel or an
// inspected TLS tunnel) is let through by these steps, in this order; the first that fails
// gives the refusal:
//   audit health -> decide -> ask -> budget -> connection slot -> vet -> dial.
// A request that can go out on an open connection skips the last three: it was decided with
// that connection's vetted address.
#pragma once

#include <expected>
#include <optional>
#include <string>

#include "exchange.hpp"
#include "link.hpp"
#include "refusal.hpp"

namespace sluice::proxy {

/// What asks to go upstream.
struct Candidate {
  const policy::Target& target;
  /// The canonical request; null for a tunnel (a CONNECT or a redirected connection).
  const policy::HttpRequest* request = nullptr;
  /// The request travels outside TLS (a rule that injects credentials must allow that).
  bool plaintext = false;
  /// A GET, HEAD, OPTIONS or TRACE whose body is still unread (needs a rule's allow_get_body).
  bool body_on_bodyless = false;
};

/// What the admission let through.
struct Admitted {
  policy::Decision decision;  // for the address it goes out to
  std::string approval;       // when an approver let it through: the approval's detail
  /// A tunnel allowed only for plain HTTP inside it: the refusal TLS in it gets.
  std::optional<Refusal> http_only;
};

/// Admits `c` on `conn` (whose client socket, watched for a hang-up while an approval waits,
/// is `client`), going out through `out`.
net::awaitable<std::expected<Admitted, Refusal>> admit(ConnState& conn, tcp::socket& client,
                                                       const Candidate& c, Outlet& out);

/// The last three steps alone (slot, vet, dial) for `c` seen as `vis`, allowed by `rule_id`
/// (`approved`: an approver let it through by that rule): a request sent again on a new
/// connection after its kept-alive one went stale. The decision for the dialled address.
net::awaitable<std::expected<policy::Decision, Refusal>> reconnect(ConnState& conn,
                                                                   const Candidate& c,
                                                                   policy::Visibility vis,
                                                                   const std::string& rule_id,
                                                                   bool approved, Outlet& out);

}  // namespace sluice::proxy
