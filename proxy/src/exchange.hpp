// The one request pipeline. Every HTTP request the proxy sees, whatever carried it (plain
// HTTP, plain HTTP inside a CONNECT tunnel, an inspected TLS tunnel; fresh, kept-alive or
// pipelined), goes through Exchange::next():
//   read the header (deadline, size limit, raw syntax checks) -> canonical request ->
//   admit (admission.hpp: the one Matcher::decide call with target, method, path and the
//   vetted address, an approval, the budget, a connection when none is open) -> record (the
//   requests row exists before anything goes upstream) -> inject -> forward -> response (1xx and
//   final, redacted) -> complete the row.
// What differs between carriers is the client stream type and the UpstreamLink.
#pragma once

#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <vector>

#include "context.hpp"
#include "field_pool.hpp"
#include "link.hpp"
#include "relay.hpp"
#include "request_body.hpp"

namespace sluice::proxy {

struct InjectionResult;  // injection.hpp

/// How requests reach this exchange.
enum class Carrier {
  kPlainHttp,     // absolute-form http:// requests to any origin (a plain proxy client)
  kHttpInTunnel,  // plain HTTP inside a CONNECT tunnel: origin-form, one target
  kInspected,     // HTTP inside an inspected TLS tunnel: origin-form, one target
};

/// Bearer tokens minted at the proxy (token_source.hpp) and sent on one connection: responses
/// on it are redacted of them. Wiped when the connection ends.
struct MintedTokens {
  static constexpr std::size_t kKept = 4;  // the newest; a token is refreshed rarely
  std::vector<std::string> values;
  MintedTokens() = default;
  /// A copy starts empty: the tokens belong to the connection that sent them (an HTTP/2
  /// stream's ConnState is a copy of its tunnel's, and redacts its own).
  MintedTokens(const MintedTokens&) {}
  MintedTokens& operator=(const MintedTokens&) = delete;
  ~MintedTokens() {
    for (auto& v : values) policy::wipeString(v);
  }
};

/// What one client connection lends its exchanges.
struct ConnState {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<const policy::Matcher> matcher;
  /// What this connection's traffic is charged to (Listener::accountFor).
  std::shared_ptr<Account> budget;
  std::function<std::shared_ptr<void>()> keep_alive;  // for deadline timers
  std::vector<std::string> injected;  // secret names injected on this connection (redaction)
  bool idle = false;     // waiting for the first byte of a kept-alive connection's next request
  bool aborted = false;  // the proxy is closing this connection
  std::string pending_approval = {};  // the approval this connection waits for (approval_wait.hpp)
  MintedTokens minted = {};           // tokens minted at the proxy sent on it (redaction)
  std::uint64_t generation = 1;       // of `matcher`: its rows' policy_generation

  const policy::Workflow& workflow() const { return matcher->workflow(); }
  Account& account() const { return *budget; }
  /// Decides from now on by `p` (both fields from one snapshot, never mixed).
  void adopt(PolicySnapshot p) {  // by value: the per-request snapshot is moved in, not copied
    matcher = std::move(p.matcher);
    generation = p.generation;
  }
};

template <typename Client, typename Upstream>
class Exchange {
 public:
  enum class Next { kContinue, kClose, kConnect };

  Exchange(ConnState& conn, Client& client, Watch& client_watch, beast::flat_buffer& client_buf);
  ~Exchange();

  /// Sets where requests go: `link`, and for tunnels the one target they may name.
  void carry(Carrier carrier, UpstreamLink<Upstream>* link, const policy::Target* tunnel_target);

  /// Reads and handles one request. kConnect: a CONNECT header is in parser() (plain HTTP
  /// carriers only; the caller takes over).
  net::awaitable<Next> next(bool first);

  ReqParser& parser() { return *req_parser_; }

  /// Where trailer fields go beside the HTTP/1.1 relay, which writes none (an HTTP/2 side).
  using TrailerSink = std::function<void(TrailerFields)>;
  /// A chunked response's trailer fields go to `sink` before its end is written to the client;
  /// without one they are dropped (HTTP/1.1 clients).
  void onResponseTrailers(TrailerSink sink) { response_trailers_ = std::move(sink); }
  /// A chunked request body's trailer fields, searched for placeholders like the rest of the
  /// request, go to `sink` before its end is written upstream; without one they are dropped.
  void onRequestTrailers(TrailerSink sink) { request_trailers_ = std::move(sink); }

  /// Answers a request that was never read as one (a malformed tunnel): row and response.
  net::awaitable<void> refuse(const policy::Target* target, const std::string& method,
                              const std::string& path, const Refusal& r, bool keep_alive);

 private:
  enum class ReadStatus { kOk, kClosed, kRefused };
  struct Located;  // the target a request names and its origin-form text

  net::awaitable<ReadStatus> readHeader(bool first, std::size_t& header_len, Refusal& refusal);
  std::optional<Refusal> parseHeader(std::size_t header_len);
  std::expected<Located, Refusal> locate();
  // Forwarding (exchange_forward.cpp): forward() and its steps.
  struct Failure {  // why forwarding stopped
    Refusal refusal;
    bool count_denied = true;  // a denial for the receipt
    bool answer = true;        // the client is still there to be told
  };
  struct ResponseHead {
    RespParser* rp = nullptr;
    ErrorCode ec;
    bool timed_out = false;
    bool client_gone = false;  // an interim response could not be passed on
  };
  // `approved`: an approver let it through (Admitted::approval), so a redial is vetted by the
  // rule that was approved, as the admission vetted the first connection.
  net::awaitable<bool> forward(const policy::Target& target, const policy::HttpRequest& req,
                               const policy::Decision& d, bool approved, bool ws);
  WholeBody bodyNeed(const policy::Decision& d) const;
  net::awaitable<std::expected<bool, Refusal>> readBody(const policy::Decision& d,
                                                        bool expect_continue, std::string& body);
  InjectionResult rewrite(const policy::Target& target, const policy::HttpRequest& canon,
                          const policy::Decision& d, bool ws, std::string* body);
  void swapTargetAndBody(std::string_view rule_id, std::string& target, std::string* body,
                         InjectionResult& inj);
  void sign(const policy::HmacSigning& h, std::string_view method, std::string_view target,
            const std::string* body, InjectionResult& inj);
  net::awaitable<bool> refuseRewrite(const policy::Target& target, const policy::HttpRequest& canon,
                                     const policy::Decision& d, const InjectionResult& inj,
                                     bool keep);
  void prepareStreamingBody(const policy::Decision& d, bool whole);
  net::awaitable<RelayResult> sendRequest(RequestRecord& rec, const std::string* whole);
  net::awaitable<std::optional<std::string>> readAheadBodyHash(std::size_t max);
  std::optional<Failure> sendFailed(const RelayResult& sent);
  std::uint64_t bodyLimit() const;
  net::awaitable<ResponseHead> readResponseHead(RequestRecord& rec, const policy::Target& target,
                                                bool is_head);
  Failure upstreamFailed(const policy::Target& target, const policy::Decision& d,
                         const ResponseHead& h);
  net::awaitable<std::optional<Failure>> redial(RequestRecord& rec, const policy::Target& target,
                                                const policy::HttpRequest& canon,
                                                const policy::Decision& d, bool approved);
  net::awaitable<bool> switchProtocols(RequestRecord& rec, RespParser& rp,
                                       const policy::Target& target,
                                       const policy::HttpRequest& canon, const policy::Decision& d,
                                       bool ws);
  bool shapeResponse(RespParser& rp, const policy::Target& target, bool is_head, bool& client_keep);
  net::awaitable<RelayResult> relayResponse(RespParser& rp);
  net::awaitable<bool> failMidResponse(RequestRecord& rec, const RelayResult& got,
                                       const policy::Target& target, const policy::Decision& d);
  net::awaitable<bool> fail(RequestRecord& rec, const policy::Target& target,
                            const policy::HttpRequest& canon, const Failure& f);
  net::awaitable<bool> upgrade(RespParser& rp, const policy::Decision& d);
  net::awaitable<bool> writeClient(std::string_view bytes);
  void redact(http::response_header<PmrFields>& head, const policy::Target* upstream);
  std::string refusalConnection(const policy::Target* target, const Refusal& r,
                                const audit::PolicyStamp& request);

  ConnState& conn_;
  Client& client_;
  Watch& watch_;
  beast::flat_buffer& buf_;
  Carrier carrier_ = Carrier::kPlainHttp;
  UpstreamLink<Upstream>* link_ = nullptr;
  const policy::Target* tunnel_target_ = nullptr;
  // Header fields of this connection's messages are allocated here. Only this connection's
  // strand touches it; declared before the parsers so it outlives them.
  FieldPool pool_;
  std::optional<ReqParser> req_parser_;
  std::optional<RespParser> resp_parser_;
  std::unique_ptr<BodyTransform> body_transform_;  // this request's (aws_signing.hpp), or null
  std::optional<std::string> body_hash_;           // the body's SHA-256 when it was read ahead
  TrailerSink response_trailers_;                  // onResponseTrailers(), or empty
  TrailerSink request_trailers_;                   // onRequestTrailers(), or empty
};

}  // namespace sluice::proxy
