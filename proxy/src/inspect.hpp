// TLS inspection: a CONNECT matched by a `tls: inspect` rule is terminated with a leaf minted
// by the proxy's CA, the upstream is reached over properly verified TLS, and every HTTP/1.1
// request inside is decided, injected and audited on its own.
#pragma once

#include <expected>
#include <memory>
#include <string>

#include "context.hpp"
#include "net.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::proxy {

/// Builds the OpenSSL contexts (client-facing server side, upstream client side) from the
/// options: TLS >= 1.2, ALPN http/1.1, upstream verification against the system store and
/// `upstream_ca_files`. Errors name the file that could not be loaded.
std::expected<std::shared_ptr<TlsContexts>, std::string> makeTlsContexts(
    const ProxyOptions& options);

/// Everything handleConnect learned before handing an inspected CONNECT over.
struct InspectStart {
  policy::Target target;
  policy::Decision decision;
  tcp::endpoint upstream_endpoint;
  audit::ConnectionEvent event;  // kind "connect", host, port, resolved ip filled in
  std::string early;             // bytes the client sent after the CONNECT header
};

/// Takes over `client` (the CONNECT is answered 200 by this call; an upstream whose TLS fails
/// verification is reported as a 502 to the first request inside the tunnel) and `upstream`
/// (TCP connected to the vetted address). The caller has
/// taken a connection slot from the listener's account; inspection releases it.
void startInspection(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                     std::shared_ptr<const policy::Matcher> matcher, tcp::socket client,
                     tcp::socket upstream, InspectStart start);

}  // namespace sluice::proxy
