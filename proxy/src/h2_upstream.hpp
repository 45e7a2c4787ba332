// An HTTP/2 upstream of an inspected tunnel: when the upstream picks h2 in ALPN (offered only
// when the client speaks h2), one nghttp2 client session on the tunnel's upstream connection
// carries every stream of the client, multiplexed. Each stream's exchange (h2_exchange.hpp)
// writes its HTTP/1.1 request into a socket pair (H2Link is its upstream); the request is sent
// as an HTTP/2 stream, and the answer comes back into the pair as HTTP/1.1 (chunked unless it
// has a Content-Length). Trailers cannot pass the exchange's HTTP/1.1 relay, so they are handed
// to the client's stream beside it (onTrailers). A GOAWAY from the upstream (or a connection it
// closed while idle) lets open streams finish; the next stream dials a new connection through
// the admission (slot, vet, dial), verified and offering h2 like the first, and the streams
// after it share that one.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "exchange.hpp"
#include "h2_pipe.hpp"
#include "link.hpp"
#include "tls_context.hpp"

namespace sluice::proxy {

/// One request on the upstream session: its socket pair and both directions.
struct H2UpStream : std::enable_shared_from_this<H2UpStream> {
  explicit H2UpStream(const net::any_io_executor& ex)
      : exchange_side(ex), glue_side(ex), watch(ex), request(ex), response(ex) {}
  tcp::socket exchange_side;  // the exchange's upstream stream
  tcp::socket glue_side;
  Watch watch;
  beast::flat_buffer buf;       // the exchange's read buffer
  beast::flat_buffer glue_buf;  // ours
  std::int32_t id = -1;
  bool te_trailers = false;  // the client said `te: trailers` (gRPC servers want it)
  std::function<void(H2Headers)> on_trailers;  // the response's trailers, for the client
  h2pipe::Outbound request;                    // the request body, to the upstream
  h2pipe::Inbound response;                    // the response, into the pair
  bool responded = false;                      // the final response header came
  bool closed = false;                         // the HTTP/2 stream is closed
};

class H2Upstream final : public H2Events, public std::enable_shared_from_this<H2Upstream> {
 public:
  /// On the tunnel's own connection (`stream`, TLS done, h2 negotiated).
  H2Upstream(ConnState& conn, SslStream& stream, Watch& watch, const policy::Target& target,
             policy::IpAddress vetted, audit::ConnectionEvent& row);
  ~H2Upstream() override;

  /// A new connection to `addrs` (vetted by the admission, which holds a connection slot for
  /// it): dialled, TLS verified, h2 required; its session running.
  static net::awaitable<
      std::expected<std::pair<VettedAddress, std::shared_ptr<H2Upstream>>, Refusal>>
  dial(ConnState& conn, const std::vector<VettedAddress>& addrs, const policy::Target& target,
       const std::string& rule_id, audit::ConnectionEvent& row);

  /// Serves the session until the connection ends (spawn it).
  static net::awaitable<void> run(std::shared_ptr<H2Upstream> self);
  /// New streams may still be opened.
  bool usable() const { return session_ && !ended_ && !goaway_; }
  /// Ends the session (the tunnel is over).
  void close();
  /// Starts the glue of `u` (its pair made): its request goes out once the exchange writes it.
  void start(std::shared_ptr<H2UpStream> u);

  const policy::Target& target() const { return target_; }
  const policy::IpAddress& vetted() const { return vetted_; }
  audit::ConnectionEvent& row() { return row_; }

  void onHeaders(std::int32_t id, H2Headers headers, bool end_stream, bool too_large) override;
  void onData(std::int32_t id, std::string_view data) override;
  void onEndStream(std::int32_t id) override;
  void onClose(std::int32_t id, std::uint32_t error_code) override;
  H2Chunk readBody(std::int32_t id, std::uint8_t* out, std::size_t max) override;
  void onGoaway(std::int32_t) override { goaway_ = true; }

 private:
  static net::awaitable<void> readLoop(std::shared_ptr<H2Upstream> self);
  static net::awaitable<void> send(std::shared_ptr<H2Upstream> self, std::shared_ptr<H2UpStream> u);
  static net::awaitable<void> receive(std::shared_ptr<H2Upstream> self,
                                      std::shared_ptr<H2UpStream> u);
  net::awaitable<void> writeFrames();
  void responseHead(H2UpStream& u, const H2Headers& headers, bool end_stream);
  std::shared_ptr<H2UpStream> find(std::int32_t id) const {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second;
  }

  struct Owned;  // a dialled connection's stream and watch (null: the tunnel's own)
  H2Upstream(ConnState& conn, std::unique_ptr<Owned> owned, const policy::Target& target,
             policy::IpAddress vetted, audit::ConnectionEvent& row);

  ConnState& conn_;
  std::unique_ptr<Owned> owned_;
  SslStream& stream_;
  Watch& watch_;
  const policy::Target& target_;
  policy::IpAddress vetted_;
  audit::ConnectionEvent& row_;
  net::any_io_executor ex_;
  Watch read_watch_;
  h2pipe::Signal out_;
  std::unique_ptr<H2Session> session_;
  std::map<std::int32_t, std::shared_ptr<H2UpStream>> streams_;
  bool ended_ = false;
  bool reader_done_ = false;
  bool goaway_ = false;
};

/// A stream's upstream on the tunnel's HTTP/2 upstream session (the exchange's UpstreamLink):
/// `current` is the session streams go out on, replaced when it had to be dialled again.
class H2Link final : public UpstreamLink<tcp::socket> {
 public:
  H2Link(ConnState& conn, std::shared_ptr<H2Upstream>& current, H2UpStream& u)
      : conn_(conn), current_(current), u_(u), row_(current->row()) {}
  const policy::IpAddress* openTo(const policy::Target& target) override;
  std::optional<Refusal> cannotDial(const std::string&) const override { return std::nullopt; }
  net::awaitable<std::expected<VettedAddress, Refusal>> dial(
      const std::vector<VettedAddress>& addrs, const policy::Target& target,
      const std::string& rule_id) override;
  tcp::socket& stream() override { return u_.exchange_side; }
  Watch& watch() override { return u_.watch; }
  beast::flat_buffer& buffer() override { return u_.buf; }
  audit::ConnectionEvent& row() override { return row_; }
  bool reused() const override { return false; }
  bool canRedial() const override { return false; }
  /// The request is about to be written: its glue starts on the current session.
  void used() override { current_->start(u_.shared_from_this()); }
  void close() override {
    ErrorCode ec;
    u_.exchange_side.close(ec);
  }
  std::string refusedConnection(const policy::Target*, const Refusal&,
                                const audit::PolicyStamp&) override {
    return row_.id;
  }

 private:
  ConnState& conn_;
  std::shared_ptr<H2Upstream>& current_;
  H2UpStream& u_;
  audit::ConnectionEvent& row_;
};

}  // namespace sluice::proxy
