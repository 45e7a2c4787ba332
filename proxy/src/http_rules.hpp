// HTTP/1.1 rules the proxy enforces on top of Beast's parser: request smuggling shapes,
// hop-by-hop stripping, Host agreement, and the readable refusal responses.
#pragma once

#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>

#include "net.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/target.hpp"

namespace sluice::proxy {

/// Header fields whose elements come from a per-connection memory pool (Beast allocates one
/// block per field; a pool makes that cheap). Plain http::fields works with every rule too.
using PmrAllocator = std::pmr::polymorphic_allocator<char>;
using PmrFields = http::basic_fields<PmrAllocator>;

/// A refusal a client and a person can read: status, X-Sluice-Reason and a JSON body
/// {"error", "workflow", "rule", "reason", "detail"}.
struct Refusal {
  http::status status = http::status::forbidden;
  std::string error;   // "denied", "bad_request", "limit_exceeded", "upstream_error", ...
  std::string reason;  // policy::reasonName vocabulary or a proxy reason ("header_timeout")
  std::string rule;
  std::string detail;
};

/// Raw header-block checks Beast does not do: obs-fold (a line starting with SP/HTAB), bare
/// LF line endings and NUL bytes. `block` is the request line + fields + final CRLF CRLF.
std::optional<std::string> checkHeaderBlock(std::string_view block);

/// Framing checks: exactly one Content-Length made of digits, Transfer-Encoding exactly
/// "chunked" and never both. Returns the refusal (400, or 501 for an unknown coding).
std::optional<Refusal> checkFraming(const http::fields& fields);
std::optional<Refusal> checkFraming(const PmrFields& fields);

/// Removes hop-by-hop fields: Connection and every field it lists (never the framing fields
/// Content-Length / Transfer-Encoding / Host, which a hostile Connection list could name to
/// desynchronise us), Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, Keep-Alive,
/// TE, Trailer, Upgrade.
void stripHopByHop(http::fields& fields);
void stripHopByHop(PmrFields& fields);

/// Checks that a Host field (if present; several are refused) names the same host and port
/// as the request target. Returns the problem, if any.
std::optional<std::string> checkHostAgrees(const http::fields& fields, const policy::Target& target,
                                           std::uint16_t default_port);
std::optional<std::string> checkHostAgrees(const PmrFields& fields, const policy::Target& target,
                                           std::uint16_t default_port);

/// Body bookkeeping of a streaming relay (a parser with buffer_body feeding a serializer),
/// shared by plain-HTTP forwarding and inspected tunnels. Before a read: offer `buf`.
template <bool isRequest, typename Allocator>
void offerBodyBuffer(http::parser<isRequest, http::buffer_body, Allocator>& p, char* buf,
                     std::size_t size) {
  p.get().body().data = buf;
  p.get().body().size = size;
}

/// After a read into the offered buffer: sets the body to the bytes read. Returns false when
/// the read parsed only framing (a chunk header) and the body is not done: writing an empty
/// buffer would make the serializer emit a zero-size chunk, which ends a chunked body early,
/// so the caller reads again instead.
template <bool isRequest, typename Allocator>
bool takeBodyBytes(http::parser<isRequest, http::buffer_body, Allocator>& p, char* buf,
                   std::size_t size) {
  auto& body = p.get().body();
  body.size = size - body.size;
  body.data = buf;
  body.more = !p.is_done();
  if (body.size == 0) {
    if (!p.is_done()) return false;
    body.data = nullptr;
  }
  return true;
}

/// The input is done: the last write only finishes the message.
template <bool isRequest, typename Allocator>
void endBody(http::parser<isRequest, http::buffer_body, Allocator>& p) {
  p.get().body().data = nullptr;
  p.get().body().size = 0;
  p.get().body().more = false;
}

/// The Host field value for an upstream request: the authority, without the port when it is
/// the scheme's default (80 for http, 443 for https).
std::string hostField(const policy::Target& t, std::uint16_t default_port);

/// The 403 for a policy denial (reason code, deciding rule, detail or nearest miss).
Refusal denialRefusal(const policy::Decision& d);

/// The 429 for an exhausted workflow limit.
Refusal limitRefusal(std::string detail);

/// The bytes of a refusal response. `keep_alive` false adds Connection: close.
std::string renderRefusal(const Refusal& r, const std::string& workflow, bool keep_alive);

}  // namespace sluice::proxy
