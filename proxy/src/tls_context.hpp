// The OpenSSL contexts of TLS inspection: the client-facing server side (leaves minted by the
// proxy's CA, SNI checked against the CONNECT target, ALPN http/1.1) and the upstream client
// side (TLS >= 1.2, verified against the system store and --upstream-ca files).
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "deadline.hpp"
#include "refusal.hpp"
#include "sluice/base/net_tls.hpp"
#include "sluice/policy/target.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {

struct TlsContexts {
  net::ssl::context server{net::ssl::context::tls_server};
  net::ssl::context upstream{net::ssl::context::tls_client};
  std::shared_ptr<CertificateAuthority> ca;
};

/// Builds the contexts from the options. Errors name the file that could not be loaded.
std::expected<std::shared_ptr<TlsContexts>, std::string> makeTlsContexts(
    const ProxyOptions& options);

/// What the SNI callback compares against, per client connection (set with watchSni).
struct SniCheck {
  std::string expected;  // the CONNECT host; empty for IP literals (any SNI then mismatches)
  std::string seen;
  bool mismatch = false;
};

/// Points the server-side SNI check of `ssl` at `check` (null to detach).
void watchSni(SSL* ssl, SniCheck* check);

/// Makes `ssl` (an upstream client connection) send SNI for `t` and verify that the
/// certificate names it (the host, or the IP literal), wildcards only as a whole label.
void expectUpstreamName(SSL* ssl, const policy::Target& t);

/// OpenSSL's last error as text (and clears the queue).
std::string sslError();

using SslStream = beast::ssl_stream<tcp::socket>;

/// Verified TLS client handshake with the upstream `t` on `s` (SNI = the host; the host name or
/// IP address checked against the certificate), offering ALPN h2 and http/1.1 when `offer_h2`,
/// else http/1.1 only. The refusal when it fails (upstream_tls, upstream_timeout), by `rule_id`.
net::awaitable<std::optional<Refusal>> upstreamTlsHandshake(
    SslStream& s, Watch& watch, const policy::Target& t, std::chrono::milliseconds timeout,
    std::function<std::shared_ptr<void>()> keep, std::string rule_id, bool offer_h2);

/// The ALPN protocol `s` negotiated ("" when none).
std::string_view negotiatedAlpn(SslStream& s);

}  // namespace sluice::proxy
