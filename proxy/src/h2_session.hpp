// An HTTP/2 session (nghttp2) turned into events. The owner feeds it the bytes read from the
// peer (recv) and writes what it hands out (send); nghttp2 does the framing, HPACK, flow
// control, SETTINGS and GOAWAY, and reports each stream's header blocks, body bytes and end
// here. No I/O and no thread of its own: everything runs on the owning connection's strand.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

struct H2Header {
  std::string name;  // lower case, pseudo-headers (":method") included
  std::string value;
};
using H2Headers = std::vector<H2Header>;

/// The value of header `name` in `headers`, or "" (pseudo-headers included).
std::string_view h2Value(const H2Headers& headers, std::string_view name);

/// One read of a body for nghttp2's data provider.
struct H2Chunk {
  std::size_t size = 0;
  bool defer = false;     // nothing yet: the owner calls resume() when there is
  bool eof = false;       // the body ends with this chunk
  bool trailers = false;  // with eof: trailers follow (submitted by the owner meanwhile)
};

/// What a session reports, from inside recv() and send().
class H2Events {
 public:
  virtual ~H2Events() = default;
  /// A complete header block of `stream` (a request or response, or trailers).
  /// `too_large`: the block went over the header list limit and was not kept whole.
  virtual void onHeaders(std::int32_t stream, H2Headers headers, bool end_stream,
                         bool too_large) = 0;
  virtual void onData(std::int32_t stream, std::string_view data) = 0;
  /// The peer ended its side of `stream` with a DATA frame.
  virtual void onEndStream(std::int32_t stream) = 0;
  /// `stream` is closed (`error_code` 0: normally; else the RST_STREAM code).
  virtual void onClose(std::int32_t stream, std::uint32_t error_code) = 0;
  /// Body bytes of `stream` to send: up to `max` copied into `out`.
  virtual H2Chunk readBody(std::int32_t stream, std::uint8_t* out, std::size_t max) = 0;
  /// The peer sent GOAWAY: streams above `last_stream` were not processed.
  virtual void onGoaway(std::int32_t last_stream) { (void)last_stream; }
};

/// Limits a server session announces and enforces.
struct H2Limits {
  std::uint32_t max_concurrent_streams = 100;
  std::uint32_t max_header_list_bytes = 64 * 1024;
  std::uint32_t initial_window = 256 * 1024;
};

class H2Session {
 public:
  /// A server session (the client's preface is expected) or a client session.
  static std::unique_ptr<H2Session> server(H2Events& events, const H2Limits& limits);
  static std::unique_ptr<H2Session> client(H2Events& events, const H2Limits& limits);
  ~H2Session();
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  /// Feeds bytes from the peer. False: a fatal protocol error (a GOAWAY may still be queued).
  bool recv(std::string_view bytes);
  /// Appends frames to send to `out`, up to about `max` bytes. False: a fatal error.
  bool send(std::string& out, std::size_t max);
  bool wantRead() const;
  bool wantWrite() const;

  /// Submits a final response (server) with a body to come through readBody when `body`.
  bool respond(std::int32_t stream, const H2Headers& headers, bool body);
  /// Submits a non-final (1xx) header block.
  bool interim(std::int32_t stream, const H2Headers& headers);
  /// Submits a request (client); returns its stream id, or a negative nghttp2 error.
  std::int32_t request(const H2Headers& headers, bool body);
  /// Submits trailers (ends the stream); call from readBody when it says `trailers`.
  bool trailers(std::int32_t stream, const H2Headers& headers);
  /// A deferred body has bytes again.
  void resume(std::int32_t stream);
  /// `n` body bytes of `stream` were taken by the owner: the peer may send that much more.
  void consume(std::int32_t stream, std::size_t n);
  void reset(std::int32_t stream, std::uint32_t error_code);
  /// GOAWAY: no new streams; open ones finish.
  void goaway(std::uint32_t error_code = NGHTTP2_NO_ERROR);
  /// The highest stream id the peer opened.
  std::int32_t lastPeerStream() const;

 private:
  struct Pending {  // a header block being received
    H2Headers headers;
    std::size_t bytes = 0;
    bool too_large = false;
  };
  H2Session(H2Events& events, const H2Limits& limits) : events_(events), limits_(limits) {}
  static nghttp2_session_callbacks* callbacks();
  bool submitSettings(bool server);
  friend struct H2Callbacks;

  H2Events& events_;
  H2Limits limits_;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, Pending> pending_;
};

}  // namespace sluice::proxy
