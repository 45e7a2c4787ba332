// TLS inspection: a CONNECT matched by a `tls: inspect` rule is terminated with a leaf minted
// by the proxy's CA, the upstream is reached over properly verified TLS, and every HTTP/1.1
// request inside goes through the one exchange pipeline (decided, injected, audited).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "context.hpp"
#include "parked_upstreams.hpp"
#include "sluice/base/net.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

/// Everything the client connection learned before handing an inspected CONNECT over.
struct InspectStart {
  policy::Target target;
  policy::Decision decision;
  tcp::endpoint upstream_endpoint;
  audit::ConnectionEvent event;      // kind "connect", host, port, resolved ip filled in
  std::string early;                 // bytes the client sent after the CONNECT (its ClientHello)
  std::shared_ptr<Account> account;  // what the tunnel is charged to (holds its slot)
};

/// Takes over `client` (the CONNECT was answered 200; an upstream whose TLS fails
/// verification is reported as a 502 to every request inside the tunnel) and `upstream` (TCP
/// connected to the vetted address), or instead `pooled` (a verified TLS connection to it that
/// an earlier tunnel parked; `upstream` is then not open). The caller has taken a connection
/// slot from the listener's account; inspection releases it. An HTTP/1.1 tunnel that ends
/// with its upstream connection idle and open parks it (parked_upstreams.hpp).
void startInspection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                     PolicySnapshot policy, tcp::socket client, tcp::socket upstream,
                     InspectStart start, std::optional<ParkedUpstreams::Taken> pooled = {});

}  // namespace sluice::proxy
