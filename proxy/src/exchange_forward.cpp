// The one request pipeline, second half (exchange.hpp): injection, forwarding, the response
// (interim and final, redacted), WebSocket upgrades. Instantiated for plain TCP and TLS.
#include <limits>
#include <sstream>

#include "admission.hpp"
#include "audit_rows.hpp"
#include "aws_signing.hpp"
#include "exchange.hpp"
#include "exchange_detail.hpp"
#include "hmac_signature.hpp"
#include "http_rules.hpp"
#include "injection.hpp"
#include "log.hpp"
#include "placeholder.hpp"
#include "request_body.hpp"
#include "shadow.hpp"
#include "sluice/base/clock.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/base/net_tls.hpp"
#include "token_source.hpp"
#include "websocket_relay.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;
using namespace exchange_detail;

// Relays bytes one way after a 101 (WebSocket) until either side ends; then closes both.
template <typename From, typename To>
net::awaitable<void> pump(std::shared_ptr<void> keep, std::shared_ptr<Watch> watch, From& from,
                          To& to, ConnState* conn, audit::ConnectionEvent* row, bool up) {
  const auto limits = conn->workflow().limits;
  auto buf = std::make_unique<char[]>(kRelayBufferBytes);
  auto& from_sock = beast::get_lowest_layer(from);
  for (;;) {
    ErrorCode ec;
    std::size_t n = 0;
    {
      Deadline d(*watch, from_sock, Clock::now() + conn->ctx->options.idle_timeout,
                 [&] { return keep; });
      n = co_await from.async_read_some(net::buffer(buf.get(), kRelayBufferBytes),
                                        net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) break;
    co_await net::async_write(to, net::buffer(buf.get(), n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    (up ? row->bytes_up : row->bytes_down) += n;
    bool within =
        up ? conn->account().addBytesOut(n, limits) : conn->account().addBytesIn(n, limits);
    if (!within) {
      row->reason = std::string(policy::reasonName(Reason::kLimitExceeded));
      break;
    }
  }
  ErrorCode ignored;
  beast::get_lowest_layer(from).close(ignored);
  beast::get_lowest_layer(to).close(ignored);
  watch->timer.cancel();
}

}  // namespace

// Wipes what holds injected secrets when the request is done with: header fields, the
// target (a placeholder swapped in its path or query) and a body read whole.
struct WipeOnExit {
  http::request_header<PmrFields>& req;
  const InjectionResult& inj;
  std::string& body;
  ~WipeOnExit() {
    wipeFields(static_cast<PmrFields&>(req), inj.touched);
    if (inj.secret_in_target) {
      auto t = req.target();
      OPENSSL_cleanse(const_cast<char*>(t.data()), t.size());
    }
    policy::wipeString(body);
  }
};

// Injects, records and forwards a decided request, then relays the response.
template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::forward(const policy::Target& target,
                                                         const policy::HttpRequest& canon,
                                                         const policy::Decision& d, bool approved,
                                                         bool ws) {
  auto& parser = *req_parser_;
  // What the client asked for, before the request is rewritten for the upstream.
  const bool body_pending = !parser.is_done();
  bool client_keep = parser.get().keep_alive() && !conn_.ctx->draining.load();
  bool expect_continue = iequals(parser.get()[http::field::expect], "100-continue");
  const bool is_head = parser.get().method() == http::verb::head;
  auto& fields = static_cast<PmrFields&>(parser.get());
  body_hash_.reset();
  std::string body;  // the whole body, when a step needs it (request_body.hpp)
  std::expected<bool, Refusal> whole = false;
  if (AwsSigning::needsBodyHash(d.rule, fields, body_pending)) {
    // The client's signature covers a body it does not state the hash of: read it first.
    if (expect_continue && !co_await writeClient(kContinue)) co_return false;
    expect_continue = false;
    body_hash_ = co_await readAheadBodyHash(AwsSigning::kMaxReadAhead);
  } else if (bodyNeed(d) != WholeBody::kStream) {  // most stream: no readBody frame
    whole = co_await readBody(d, expect_continue, body);
  }
  if (!whole) {
    policy::wipeString(body);
    co_await refuse(&target, canon.method, canon.path, whole.error(), false);
    co_return false;
  }
  auto inj = rewrite(target, canon, d, ws, *whole ? &body : nullptr);
  if (inj.error || inj.placeholder_leak) {
    WipeOnExit wipe{parser.get(), inj, body};
    co_return co_await refuseRewrite(target, canon, d, inj, client_keep && parser.is_done());
  }
  // A rule that mints a bearer token (no frame for any other): the token (waiting for its
  // fetch if need be), or the refusal; the connection goes on when no body is left unread.
  std::optional<Refusal> no_token;
  if (d.rule && d.rule->inject.mintsToken())
    no_token = co_await injectMintedToken(conn_, d, fields, inj);
  if (const auto& r = no_token) {
    WipeOnExit wipe{parser.get(), inj, body};
    const bool go_on = client_keep && parser.is_done();
    co_await refuse(&target, canon.method, canon.path, *r, go_on);
    co_return go_on;
  }
  prepareStreamingBody(d, *whole);
  // The row exists before the first byte goes upstream, and is written on every path out.
  RequestRecord rec(*conn_.ctx, *conn_.listener, conn_.account(), conn_.workflow(), link_->row().id,
                    canon.method, target.host, canon.path, conn_.generation);
  rec.decided(d);
  rec.injected(inj.secrets);
  rec.setPort(target.port);
  rec.at(link_->row().resolved_ip, carrier_ != Carrier::kInspected);
  shadowOfRequest(link_->row(), rec.shadow());  // an origin connection opened for it
  WipeOnExit wipe{parser.get(), inj, body};
  if (expect_continue && !parser.is_done() && !co_await writeClient(kContinue)) co_return false;
  for (int attempt = 0;; ++attempt) {
    const bool reused = link_->reused();
    auto sent = co_await sendRequest(rec, *whole ? &body : nullptr);
    if (auto f = sendFailed(sent)) co_return co_await fail(rec, target, canon, *f);
    ResponseHead head{nullptr, sent.ec, sent.timed_out};
    if (sent.fail == RelayFail::kNone) head = co_await readResponseHead(rec, target, is_head);
    if (head.client_gone) co_return false;
    if (sent.fail != RelayFail::kNone || head.ec) {
      // A reused keep-alive connection the origin had already closed: send again once on a
      // fresh one when the request had no body (safe to resend).
      const bool stale = reused && attempt == 0 && !body_pending && !head.timed_out &&
                         (!head.rp || !head.rp->got_some()) && link_->canRedial();
      link_->close();
      if (!stale) co_return co_await fail(rec, target, canon, upstreamFailed(target, d, head));
      if (auto f = co_await redial(rec, target, canon, d, approved))
        co_return co_await fail(rec, target, canon, *f);
      continue;
    }
    RespParser& rp = *head.rp;
    if (rp.get().result_int() == 101)
      co_return co_await switchProtocols(rec, rp, target, canon, d, ws);
    const bool upstream_keep = shapeResponse(rp, target, is_head, client_keep);
    auto got = co_await relayResponse(rp);
    rec.outcome(rp.get().result_int());
    if (got.fail != RelayFail::kNone) co_return co_await failMidResponse(rec, got, target, d);
    if (upstream_keep)
      link_->idle();
    else
      link_->close();
    co_return client_keep;
  }
}

// Strips hop-by-hop fields, injects, and sets exactly the request the policy judged: the
// canonical target (placeholders swapped), the target's authority as Host, a body read whole
// (placeholders swapped, Content-Length recomputed).
template <typename Client, typename Upstream>
InjectionResult Exchange<Client, Upstream>::rewrite(const policy::Target& target,
                                                    const policy::HttpRequest& canon,
                                                    const policy::Decision& d, bool ws,
                                                    std::string* body) {
  auto& req = req_parser_->get();
  auto& fields = static_cast<PmrFields&>(req);
  // Hop-by-hop fields go first, so a client's `Connection: Authorization` cannot strip what
  // is injected next.
  stripHopByHop(req);
  req.erase(http::field::expect);
  // SigV4 (inject.aws_sigv4): the client's signature is checked on the request as it was sent,
  // and made again with the real key below, once the request is what the upstream will get.
  body_transform_.reset();
  InjectionResult signing;
  AwsSigning aws(d.rule, conn_.listener->secrets.get(), conn_.listener->placeholders);
  const auto sent_target = req.target();
  auto body_hash = req_parser_->is_done() ? std::optional<std::string_view>(sigv4::kEmptyHash)
                                          : std::optional<std::string_view>(body_hash_);
  if (!aws.verify(fields, canon.method, {sent_target.data(), sent_target.size()}, body_hash,
                  signing))
    return signing;
  const auto& placeholders = conn_.listener->placeholders;
  const std::string_view rule_id = d.rule ? std::string_view(d.rule->id) : std::string_view();
  std::string forward_target = canon.target();
  // One decision over every part of the request as the client sent it: a token of another
  // rule anywhere refuses the whole request (before anything is swapped).
  auto hits = findPlaceholdersInFields(fields, rule_id, placeholders);
  hits |= findPlaceholders(forward_target, rule_id, placeholders);
  if (body) hits |= findPlaceholders(*body, rule_id, placeholders);
  if (hits.leak) {
    InjectionResult leak;
    leak.placeholder_leak = true;
    return leak;
  }
  auto inj = applyInjection(fields, d.rule, conn_.listener->secrets.get(), placeholders);
  if (!inj.error && hits.own) swapTargetAndBody(rule_id, forward_target, body, inj);
  if (!inj.error && d.rule && d.rule->inject.hmac)
    sign(*d.rule->inject.hmac, canon.method, forward_target, body, inj);
  if (inj.error) return inj;
  for (const auto& s : inj.secrets)
    if (std::find(conn_.injected.begin(), conn_.injected.end(), s) == conn_.injected.end())
      conn_.injected.push_back(s);
  req.target(forward_target);
  policy::wipeString(forward_target);
  req.set(http::field::host, hostField(target, carrier_ == Carrier::kInspected ? 443 : 80));
  // HTTP/1.1 persists unless a Connection field says otherwise; stripHopByHop removed the
  // client's, so only one injected since needs rewriting.
  if (req.version() < 11 || req.count(http::field::connection) != 0) req.keep_alive(true);
  if (body) setWholeBodyFraming(req, body->size());
  // SigV4 signs the target as the client sent it (its stand-ins are never swapped).
  std::string signed_target = canon.target();
  if (!aws.resign(fields, signed_target, inj, body_transform_)) return inj;
  if (signed_target != canon.target()) req.target(signed_target);
  if (ws) {
    req.set(http::field::connection, "Upgrade");
    req.set(http::field::upgrade, "websocket");
    // Compressed frames (permessage-deflate) cannot be searched for placeholders.
    if (!placeholders.empty()) req.erase(http::field::sec_websocket_extensions);
  }
  return inj;
}

// Swaps the deciding rule's placeholder tokens in the forwarded target and a body read whole.
template <typename Client, typename Upstream>
void Exchange<Client, Upstream>::swapTargetAndBody(std::string_view rule_id, std::string& target,
                                                   std::string* body, InjectionResult& inj) {
  const auto* secrets = conn_.listener->secrets.get();
  const auto& placeholders = conn_.listener->placeholders;
  std::optional<std::string> why;
  if (findPlaceholders(target, rule_id, placeholders).own) {
    inj.secret_in_target = true;
    why = swapPlaceholders(target, rule_id, secrets, placeholders, inj.secrets);
  }
  if (!why && body) why = swapPlaceholders(*body, rule_id, secrets, placeholders, inj.secrets);
  if (why) inj.error = std::move(why);
}

// Sets the rule's HMAC signature (and timestamp) over the request as it goes upstream:
// placeholders swapped, the body read whole by readBody.
template <typename Client, typename Upstream>
void Exchange<Client, Upstream>::sign(const policy::HmacSigning& h, std::string_view method,
                                      std::string_view target, const std::string* body,
                                      InjectionResult& inj) {
  const auto q = target.find('?');
  HmacParts parts{method, target.substr(0, q),
                  q == std::string_view::npos ? std::string_view() : target.substr(q + 1),
                  body ? std::string_view(*body) : std::string_view(), base::nowMs() / 1000};
  auto headers = hmacHeaders(h, parts, conn_.listener->secrets.get());
  if (!headers) {
    inj.error = std::move(headers.error());
    return;
  }
  // set() replaces any field of that name the client sent.
  for (const auto& [name, value] : *headers) req_parser_->get().set(name, value);
}

// Refuses a request rewrite() could not complete: a placeholder of another rule in it (403
// placeholder_leak, the connection kept when nothing of the request is left unread), or a
// secret missing from the store (502, closed).
template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::refuseRewrite(const policy::Target& target,
                                                               const policy::HttpRequest& canon,
                                                               const policy::Decision& d,
                                                               const InjectionResult& inj,
                                                               bool keep) {
  if (inj.placeholder_leak) {
    log().warn("placeholder of another rule sent on {} {}{} (rule {}); refused", canon.method,
               target.authority(), canon.path, d.rule_id);
    Refusal r = refusal(Reason::kPlaceholderLeak,
                        "the request carries a placeholder token that only another rule's "
                        "requests may send",
                        d.rule_id);
    co_await refuse(&target, canon.method, canon.path, r, keep);
    co_return keep;
  }
  Refusal r = refusal(inj.error_reason, *inj.error, d.rule_id);
  co_await refuse(&target, canon.method, canon.path, r, false);
  co_return false;
}

// What becomes of the request's body under decision `d` (request_body.hpp).
template <typename Client, typename Upstream>
WholeBody Exchange<Client, Upstream>::bodyNeed(const policy::Decision& d) const {
  const auto& placeholders = conn_.listener->placeholders;
  // A SigV4-signed body streams as it is: its hash is signed, so nothing in it may change,
  // and a streaming upload's chunks are signed again on the way (body_transform_).
  if (d.rule && d.rule->inject.aws_sigv4) return WholeBody::kStream;
  BodyNeeds needs;
  needs.swaps = d.rule && hasPlaceholder(d.rule->id, placeholders);
  needs.scans = !placeholders.empty();
  needs.signs = d.rule && d.rule->inject.hmac && d.rule->inject.hmac->needs_body;
  return wholeBodyNeed(*req_parser_, needs, kWholeBodyBytes);
}

// The whole-body stage (request_body.hpp): true when the body was read into `body` (to be
// searched, swapped or signed before it leaves), false when it streams; the refusal when it
// is too large to read whole or broke off.
template <typename Client, typename Upstream>
auto Exchange<Client, Upstream>::readBody(const policy::Decision& d, bool expect_continue,
                                          std::string& body)
    -> net::awaitable<std::expected<bool, Refusal>> {
  auto& parser = *req_parser_;
  const auto need = bodyNeed(d);
  auto too_large = [&] {
    return std::unexpected(refusal(Reason::kBodyTooLarge,
                                   "request body exceeds " + std::to_string(kWholeBodyBytes) +
                                       " bytes, the most the proxy reads whole to search it "
                                       "for placeholders or sign it",
                                   d.rule_id));
  };
  if (need == WholeBody::kStream) co_return false;
  if (need == WholeBody::kTooLarge) co_return too_large();
  if (expect_continue && !co_await writeClient(kContinue))
    co_return std::unexpected(refusal(Reason::kInvalidRequest, "client went away"));
  Endpoint<Client> from_client{client_, watch_, buf_};
  auto got = co_await readWholeBody(from_client, parser, body, kWholeBodyBytes,
                                    conn_.ctx->options.upstream_timeout,
                                    [this] { return conn_.keep_alive(); });
  if (got.too_large) co_return too_large();
  if (auto f = sendFailed(got.result)) co_return std::unexpected(f->refusal);
  co_return true;
}

// What a body that streams (not read whole) passes through on its way. It is still searched
// for other rules' tokens as it goes: one found stops it before its bytes leave (unless SigV4
// signs this body, whose transform is set already). To a side that takes trailers (an HTTP/2
// upstream) a chunked body's trailer fields are searched the same way (another rule's token
// refuses the request before its end leaves; its own rule's pass unswapped), then handed over.
template <typename Client, typename Upstream>
void Exchange<Client, Upstream>::prepareStreamingBody(const policy::Decision& d, bool whole) {
  if (whole || req_parser_->is_done()) return;
  if (!body_transform_ && !conn_.listener->placeholders.empty())
    body_transform_ = std::make_unique<StreamingLeakScan>(d.rule_id, conn_.listener->placeholders);
  if (!request_trailers_ || !req_parser_->chunked()) return;
  auto take = [this, rule = d.rule_id](TrailerFields&& trailers, BodyTransform& tap) {
    PlaceholderHits hits;
    for (const auto& [name, value] : trailers) {
      hits |= findPlaceholders(name, rule, conn_.listener->placeholders);
      hits |= findPlaceholders(value, rule, conn_.listener->placeholders);
    }
    if (hits.leak) {
      tap.reason = Reason::kPlaceholderLeak;
      tap.detail = "a request trailer holds the placeholder of another rule";
      return false;
    }
    request_trailers_(std::move(trailers));
    return true;
  };
  body_transform_ =
      std::make_unique<TrailerTap<true>>(*req_parser_, std::move(take), std::move(body_transform_));
}

// Sends the request (header and body) on the link's connection, counting its bytes: the body
// streams from the client, or is `whole` (read by readBody). Not a coroutine itself: it hands
// back the relay's, so the request costs no extra frame.
template <typename Client, typename Upstream>
net::awaitable<RelayResult> Exchange<Client, Upstream>::sendRequest(RequestRecord& rec,
                                                                    const std::string* whole) {
  link_->used();
  auto* row = &link_->row();
  // Captured by value: the relay's frame outlives this function.
  auto count_out = [this, row, limits = &conn_.workflow().limits](std::size_t n) {
    row->bytes_up += n;
    return conn_.account().addBytesOut(n, *limits);
  };
  auto keep_alive = [this] { return conn_.keep_alive(); };
  Endpoint<Client> from_client{client_, watch_, buf_};
  Endpoint<Upstream> to_upstream{link_->stream(), link_->watch(), link_->buffer()};
  rec.forwarding();  // on record before the first byte leaves
  if (whole)
    return writeWholeRequest(to_upstream, *req_parser_, *whole, conn_.ctx->options.upstream_timeout,
                             count_out, keep_alive);
  return relayMessage<true>(from_client, *req_parser_, to_upstream,
                            conn_.ctx->options.upstream_timeout, count_out, keep_alive,
                            body_transform_.get());
}

// Reads a Content-Length body of at most `max` bytes into the client buffer without consuming
// it (the relay sends it on from there) and returns its hex SHA-256; nullopt when the body is
// chunked, larger, or does not arrive in time.
template <typename Client, typename Upstream>
net::awaitable<std::optional<std::string>> Exchange<Client, Upstream>::readAheadBodyHash(
    std::size_t max) {
  auto len = req_parser_->content_length();
  if (req_parser_->chunked() || !len || *len > max) co_return std::nullopt;
  const auto deadline = Clock::now() + conn_.ctx->options.upstream_timeout;
  while (buf_.size() < *len) {
    ErrorCode ec;
    Deadline d(watch_, beast::get_lowest_layer(client_), deadline,
               [this] { return conn_.keep_alive(); });
    std::size_t n = co_await client_.async_read_some(buf_.prepare(*len - buf_.size()),
                                                     net::redirect_error(net::use_awaitable, ec));
    buf_.commit(n);
    if (ec) co_return std::nullopt;
  }
  auto data = buf_.data();
  co_return base::sha256Hex(
      {static_cast<const char*>(data.data()), static_cast<std::size_t>(*len)});
}

// Why sending stopped because of the client's side or a limit (the upstream has part of a
// request: that connection is done), or nullopt.
template <typename Client, typename Upstream>
auto Exchange<Client, Upstream>::sendFailed(const RelayResult& sent) -> std::optional<Failure> {
  if (sent.fail == RelayFail::kInput) {
    link_->close();
    if (peerGone(sent.ec) || sent.timed_out)
      return Failure{refusal(Reason::kInvalidRequest, "client stopped sending the request body"),
                     false, false};
    if (sent.ec == http::error::body_limit)
      return Failure{refusal(Reason::kBodyTooLarge,
                             "request body exceeds " + std::to_string(bodyLimit()) + " bytes")};
    return Failure{
        refusal(Reason::kInvalidRequest, "malformed request body: " + sent.ec.message())};
  }
  if (sent.fail == RelayFail::kTransform) {
    // The body was refused part-way (a SigV4 chunk signature): the upstream has part of it and
    // must never see the rest, so its connection goes.
    link_->close();
    return Failure{refusal(body_transform_->reason, body_transform_->detail)};
  }
  if (sent.fail == RelayFail::kLimit) {
    endConnection(link_->row(), Reason::kLimitExceeded, "workflow limit max_bytes_out reached");
    link_->close();
    return Failure{limitRefusal("workflow limit max_bytes_out reached")};
  }
  return std::nullopt;
}

// Reads the response header; interim 1xx responses (other than 101) are passed on, redacted.
template <typename Client, typename Upstream>
auto Exchange<Client, Upstream>::readResponseHead(RequestRecord& rec, const policy::Target& target,
                                                  bool is_head) -> net::awaitable<ResponseHead> {
  ResponseHead head;
  for (;;) {
    head.rp = &resp_parser_.emplace(std::piecewise_construct, std::make_tuple(),
                                    std::make_tuple(PmrAllocator(&pool_)));
    head.rp->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (is_head) head.rp->skip(true);
    {
      Deadline dl(link_->watch(), beast::get_lowest_layer(link_->stream()),
                  Clock::now() + conn_.ctx->options.upstream_timeout,
                  [this] { return conn_.keep_alive(); });
      auto& buf = link_->buffer();
      // Beast's async_read_header, without its composed operation: the parser takes what is
      // buffered, and each read is one read_some.
      while (!headerFrom(*head.rp, buf, head.ec)) {
        const std::size_t n = co_await link_->stream().async_read_some(
            buf.prepare(beast::read_size(buf, 65536)),
            net::redirect_error(net::use_awaitable, head.ec));
        buf.commit(n);
        if (head.ec) {
          endOfStream(*head.rp, head.ec);
          break;
        }
      }
      if (head.ec && dl.fired()) head.timed_out = true;
    }
    if (head.ec) co_return head;
    auto code = head.rp->get().result_int();
    if (code < 100 || code >= 200 || code == 101) co_return head;
    redact(head.rp->get(), &target);
    std::ostringstream interim_stream;
    interim_stream << head.rp->get().base();
    std::string interim = interim_stream.str();
    rec.outcome(code);
    if (!co_await writeClient(interim)) {
      link_->close();
      head.client_gone = true;
      co_return head;
    }
  }
}

// The refusal for an upstream that failed before its answer (or timed out).
template <typename Client, typename Upstream>
auto Exchange<Client, Upstream>::upstreamFailed(const policy::Target& target,
                                                const policy::Decision& d, const ResponseHead& h)
    -> Failure {
  const auto timeout = conn_.ctx->options.upstream_timeout;
  if (h.timed_out)
    return Failure{networkFailure(Reason::kUpstreamTimeout, kFailureTimeout,
                                  "upstream " + target.authority() + " did not answer within " +
                                      std::to_string(timeout.count()) + " ms",
                                  d.rule_id)};
  return Failure{networkFailure(
      Reason::kUpstreamError, failureOf(h.ec),
      "upstream " + target.authority() + " failed before answering: " + h.ec.message(), d.rule_id)};
}

// A new connection for a request whose kept-alive one went stale: nullopt when it may be sent
// again on it (the address still falls under the rule that allowed it).
template <typename Client, typename Upstream>
auto Exchange<Client, Upstream>::redial(RequestRecord& rec, const policy::Target& target,
                                        const policy::HttpRequest& canon, const policy::Decision& d,
                                        bool approved) -> net::awaitable<std::optional<Failure>> {
  const Candidate c{target, &canon, carrier_ != Carrier::kInspected};
  auto opened =
      co_await reconnect(conn_, c, policy::Visibility::kPlainHttp, d.rule_id, approved, *link_);
  if (opened && opened->rule == d.rule) {
    rec.setConnection(link_->row().id);
    co_return std::nullopt;
  }
  if (!opened) co_return Failure{std::move(opened.error())};
  co_return Failure{refusal(Reason::kUpstreamError,
                            "upstream " + target.authority() +
                                " closed a kept-alive connection and its address now falls under "
                                "another rule",
                            d.rule_id)};
}

// A 101 answer: relayed as a WebSocket when the client asked for one, else refused.
template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::switchProtocols(RequestRecord& rec, RespParser& rp,
                                                                 const policy::Target& target,
                                                                 const policy::HttpRequest& canon,
                                                                 const policy::Decision& d,
                                                                 bool ws) {
  if (!ws) {
    link_->close();
    const Failure f{networkFailure(Reason::kUpstreamError, kFailureProtocol,
                                   "upstream switched protocols without being asked to",
                                   d.rule_id)};
    co_return co_await fail(rec, target, canon, f);
  }
  rec.outcome(101);
  rec.finish();
  co_return co_await upgrade(rp, d);
}

// Readies the response header for the client: framing decides whether either side can keep
// its connection; hop-by-hop fields go, injected secrets are redacted. True when the upstream
// connection can carry another request.
template <typename Client, typename Upstream>
bool Exchange<Client, Upstream>::shapeResponse(RespParser& rp, const policy::Target& target,
                                               bool is_head, bool& client_keep) {
  auto& resp = rp.get();
  const int status = resp.result_int();
  const bool delimited = rp.chunked() || rp.content_length().has_value() || is_head ||
                         status == 204 || status == 304 || rp.is_done();
  const bool upstream_keep = resp.keep_alive() && delimited;
  client_keep = client_keep && delimited && (upstream_keep || carrier_ == Carrier::kPlainHttp);
  stripHopByHop(resp);
  redact(resp, &target);
  // No Connection field is left: an HTTP/1.1 response that stays open needs none.
  if (!client_keep || resp.version() < 11) resp.keep_alive(client_keep);
  return upstream_keep;
}

// Relays the response (header and body) to the client, counting its bytes (like sendRequest,
// without a frame of its own).
template <typename Client, typename Upstream>
net::awaitable<RelayResult> Exchange<Client, Upstream>::relayResponse(RespParser& rp) {
  auto* row = &link_->row();
  // Captured by value: the relay's frame outlives this function.
  auto count_in = [this, row, limits = &conn_.workflow().limits](std::size_t n) {
    row->bytes_down += n;
    return conn_.account().addBytesIn(n, *limits);
  };
  auto keep_alive = [this] { return conn_.keep_alive(); };
  Endpoint<Upstream> from_upstream{link_->stream(), link_->watch(), link_->buffer()};
  Endpoint<Client> to_client{client_, watch_, buf_};
  std::optional<TrailerTap<false>> tap;
  if (response_trailers_)
    tap.emplace(rp, [this](TrailerFields&& t, BodyTransform&) {
      response_trailers_(std::move(t));
      return true;
    });
  co_return co_await relayMessage<false>(from_upstream, rp, to_client,
                                         conn_.ctx->options.upstream_timeout, count_in, keep_alive,
                                         tap ? &*tap : nullptr);
}

// The response broke off (a limit, the upstream): the row says why; a client that has no
// header yet still gets an answer, otherwise closing the connection is the only honest signal.
template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::failMidResponse(RequestRecord& rec,
                                                                 const RelayResult& got,
                                                                 const policy::Target& target,
                                                                 const policy::Decision& d) {
  if (got.fail == RelayFail::kLimit)
    endConnection(link_->row(), Reason::kLimitExceeded, "workflow limit max_bytes_in reached");
  else if (got.fail == RelayFail::kInput)
    endConnection(link_->row(), Reason::kUpstreamError,
                  "upstream failed mid-response: " + got.ec.message());
  link_->close();
  if (got.header_written) co_return false;
  Refusal r = got.fail == RelayFail::kLimit
                  ? limitRefusal("workflow limit max_bytes_in reached")
                  : networkFailure(Reason::kUpstreamError, failureOf(got.ec),
                                   "upstream " + target.authority() +
                                       " failed mid-response: " + got.ec.message(),
                                   d.rule_id);
  rec.refused(r);
  std::string text = renderRefusal(r, conn_.workflow().name, false);
  co_await writeClient(text);
  co_return false;
}

// Records why forwarding stopped and, unless the client is gone, answers with the refusal.
// Always false: the connection ends.
template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::fail(RequestRecord& rec,
                                                      const policy::Target& target,
                                                      const policy::HttpRequest& canon,
                                                      const Failure& f) {
  const Refusal& r = f.refusal;
  if (f.count_denied)
    rec.refused(r);
  else
    rec.outcome(static_cast<int>(r.status), r.reason);
  log().info("refused {} {}{} rule={} reason={}: {}", canon.method, target.authority(), canon.path,
             r.rule.empty() ? "-" : r.rule, r.reasonText(), r.detail);
  if (!f.answer) co_return false;
  std::string text = renderRefusal(r, conn_.workflow().name, false);
  co_await writeClient(text);
  co_return false;
}

// After a 101: frames both ways until either side ends, through the frame relays when
// something must see them (websocket_relay.hpp), else as a tunnel.
template <typename Client, typename Upstream>
net::awaitable<bool> Exchange<Client, Upstream>::upgrade(RespParser& rp,
                                                         const policy::Decision& d) {
  ErrorCode ec;
  redact(rp.get(), tunnel_target_);
  http::message<false, http::empty_body, PmrFields> head{rp.get().base()};
  head.set(http::field::connection, "Upgrade");
  head.set(http::field::upgrade, "websocket");
  co_await http::async_write(client_, head, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  auto& up = link_->stream();
  auto* row = &link_->row();
  auto keep = conn_.keep_alive();
  auto ex = beast::get_lowest_layer(client_).get_executor();
  if (auto relays = webSocketRelays(d.rule_id, conn_.listener->secrets,
                                    conn_.listener->placeholders, conn_.injected)) {
    // Bytes that arrived after the headers on either side are the first frames.
    std::string from_client = beast::buffers_to_string(buf_.data());
    std::string from_upstream = beast::buffers_to_string(link_->buffer().data());
    buf_.consume(buf_.size());
    link_->buffer().consume(link_->buffer().size());
    net::co_spawn(ex,
                  relayFrames(keep, std::make_shared<Watch>(ex), client_, up, &conn_, row, true,
                              std::move(from_client), std::move(relays->first)),
                  net::detached);
    co_await relayFrames(keep, std::make_shared<Watch>(ex), up, client_, &conn_, row, false,
                         std::move(from_upstream), std::move(relays->second));
    co_return false;
  }
  // Bytes that arrived after the headers on either side go first.
  if (link_->buffer().size()) {
    co_await net::async_write(client_, link_->buffer().data(),
                              net::redirect_error(net::use_awaitable, ec));
    row->bytes_down += link_->buffer().size();
    link_->buffer().consume(link_->buffer().size());
  }
  if (!ec && buf_.size()) {
    co_await net::async_write(up, buf_.data(), net::redirect_error(net::use_awaitable, ec));
    row->bytes_up += buf_.size();
    buf_.consume(buf_.size());
  }
  if (ec) co_return false;
  net::co_spawn(ex, pump(keep, std::make_shared<Watch>(ex), client_, up, &conn_, row, true),
                net::detached);
  co_await pump(keep, std::make_shared<Watch>(ex), up, client_, &conn_, row, false);
  co_return false;
}

using SslStream = beast::ssl_stream<tcp::socket>;
#define SLUICE_INSTANTIATE(C, U)                                                               \
  template net::awaitable<bool> Exchange<C, U>::forward(                                       \
      const policy::Target&, const policy::HttpRequest&, const policy::Decision&, bool, bool); \
  template net::awaitable<bool> Exchange<C, U>::upgrade(RespParser&, const policy::Decision&);
SLUICE_INSTANTIATE(tcp::socket, tcp::socket)
SLUICE_INSTANTIATE(SslStream, SslStream)
SLUICE_INSTANTIATE(tcp::socket, SslStream)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::proxy
