// nghttp2 sessions as events (h2_session.hpp).
#include "h2_session.hpp"

#include <algorithm>

namespace sluice::proxy {

namespace {

// nghttp2 takes the header list as name/value pointers into our strings (NO_COPY would keep
// them; these are copied, so the vector may go once the submit call returns).
std::vector<nghttp2_nv> toNv(const H2Headers& headers) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const auto& h : headers) {
    nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(),
                  h.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

}  // namespace

std::string_view h2Value(const H2Headers& headers, std::string_view name) {
  for (const auto& h : headers)
    if (h.name == name) return h.value;
  return {};
}

// The C callbacks: each finds the session in user_data and turns the frame into an event.
struct H2Callbacks {
  static H2Session& of(void* user) { return *static_cast<H2Session*>(user); }

  static int beginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    of(user).pending_[frame->hd.stream_id] = {};
    return 0;
  }

  // RFC 9113 6.5.2: a header list's size counts 32 bytes per field on top of name and value.
  static int header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                    std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                    std::uint8_t, void* user) {
    auto& s = of(user);
    auto& p = s.pending_[frame->hd.stream_id];
    p.bytes += namelen + valuelen + 32;
    if (p.bytes > s.limits_.max_header_list_bytes) p.too_large = true;
    if (!p.too_large)
      p.headers.push_back({std::string(reinterpret_cast<const char*>(name), namelen),
                           std::string(reinterpret_cast<const char*>(value), valuelen)});
    return 0;
  }

  static int frameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto& s = of(user);
    const auto id = frame->hd.stream_id;
    const bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        auto node = s.pending_.extract(id);
        if (node.empty()) return 0;
        s.events_.onHeaders(id, std::move(node.mapped().headers), end, node.mapped().too_large);
        return 0;
      }
      case NGHTTP2_DATA:
        if (end) s.events_.onEndStream(id);
        return 0;
      case NGHTTP2_GOAWAY:
        s.events_.onGoaway(frame->goaway.last_stream_id);
        return 0;
      default:
        return 0;
    }
  }

  static int dataChunk(nghttp2_session*, std::uint8_t, std::int32_t stream,
                       const std::uint8_t* data, std::size_t len, void* user) {
    of(user).events_.onData(stream, std::string_view(reinterpret_cast<const char*>(data), len));
    return 0;
  }

  static int streamClose(nghttp2_session*, std::int32_t stream, std::uint32_t error_code,
                         void* user) {
    auto& s = of(user);
    s.pending_.erase(stream);
    s.events_.onClose(stream, error_code);
    return 0;
  }

  static ssize_t readBody(nghttp2_session*, std::int32_t stream, std::uint8_t* buf,
                          std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                          void* user) {
    auto c = of(user).events_.readBody(stream, buf, length);
    if (c.defer) return NGHTTP2_ERR_DEFERRED;
    if (c.eof) *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (c.eof && c.trailers) *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    return static_cast<ssize_t>(c.size);
  }
};

nghttp2_session_callbacks* H2Session::callbacks() {
  static nghttp2_session_callbacks* cbs = [] {
    nghttp2_session_callbacks* c = nullptr;
    nghttp2_session_callbacks_new(&c);
    nghttp2_session_callbacks_set_on_begin_headers_callback(c, H2Callbacks::beginHeaders);
    nghttp2_session_callbacks_set_on_header_callback(c, H2Callbacks::header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, H2Callbacks::frameRecv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, H2Callbacks::dataChunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, H2Callbacks::streamClose);
    return c;
  }();
  return cbs;
}

namespace {

// Window updates are sent only for body bytes the owner has taken (consume): a peer sending
// faster than the other side reads is held back by flow control, not buffered.
nghttp2_option* sessionOptions() {
  static nghttp2_option* opt = [] {
    nghttp2_option* o = nullptr;
    nghttp2_option_new(&o);
    nghttp2_option_set_no_auto_window_update(o, 1);
    return o;
  }();
  return opt;
}

}  // namespace

std::unique_ptr<H2Session> H2Session::server(H2Events& events, const H2Limits& limits) {
  std::unique_ptr<H2Session> s(new H2Session(events, limits));
  if (nghttp2_session_server_new2(&s->session_, callbacks(), s.get(), sessionOptions()) != 0)
    return nullptr;
  if (!s->submitSettings(true)) return nullptr;
  return s;
}

std::unique_ptr<H2Session> H2Session::client(H2Events& events, const H2Limits& limits) {
  std::unique_ptr<H2Session> s(new H2Session(events, limits));
  if (nghttp2_session_client_new2(&s->session_, callbacks(), s.get(), sessionOptions()) != 0)
    return nullptr;
  if (!s->submitSettings(false)) return nullptr;
  return s;
}

bool H2Session::submitSettings(bool server) {
  std::vector<nghttp2_settings_entry> iv{
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits_.initial_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, limits_.max_header_list_bytes}};
  if (server) {
    iv.push_back({NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams});
  } else {
    iv.push_back({NGHTTP2_SETTINGS_ENABLE_PUSH, 0});
  }
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv.data(), iv.size()) != 0) return false;
  // The connection's window is shared by every stream: room for a few streams' windows.
  return nghttp2_session_set_local_window_size(
             session_, NGHTTP2_FLAG_NONE, 0,
             static_cast<std::int32_t>(4 * limits_.initial_window)) == 0;
}

H2Session::~H2Session() {
  if (session_) nghttp2_session_del(session_);
}

bool H2Session::recv(std::string_view bytes) {
  auto n = nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                    bytes.size());
  return n >= 0 && static_cast<std::size_t>(n) == bytes.size();
}

bool H2Session::send(std::string& out, std::size_t max) {
  while (out.size() < max) {
    const std::uint8_t* data = nullptr;
    auto n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) return false;
    if (n == 0) break;
    out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  return true;
}

bool H2Session::wantRead() const { return nghttp2_session_want_read(session_) != 0; }
bool H2Session::wantWrite() const { return nghttp2_session_want_write(session_) != 0; }

bool H2Session::respond(std::int32_t stream, const H2Headers& headers, bool body) {
  auto nv = toNv(headers);
  nghttp2_data_provider provider{};
  provider.read_callback = H2Callbacks::readBody;
  return nghttp2_submit_response(session_, stream, nv.data(), nv.size(),
                                 body ? &provider : nullptr) == 0;
}

bool H2Session::interim(std::int32_t stream, const H2Headers& headers) {
  auto nv = toNv(headers);
  return nghttp2_submit_headers(session_, NGHTTP2_FLAG_NONE, stream, nullptr, nv.data(), nv.size(),
                                nullptr) >= 0;
}

std::int32_t H2Session::request(const H2Headers& headers, bool body) {
  auto nv = toNv(headers);
  nghttp2_data_provider provider{};
  provider.read_callback = H2Callbacks::readBody;
  return nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), body ? &provider : nullptr,
                                nullptr);
}

bool H2Session::trailers(std::int32_t stream, const H2Headers& headers) {
  auto nv = toNv(headers);
  return nghttp2_submit_trailer(session_, stream, nv.data(), nv.size()) == 0;
}

void H2Session::resume(std::int32_t stream) { nghttp2_session_resume_data(session_, stream); }

void H2Session::consume(std::int32_t stream, std::size_t n) {
  if (n) nghttp2_session_consume(session_, stream, n);
}

void H2Session::reset(std::int32_t stream, std::uint32_t error_code) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, error_code);
}

void H2Session::goaway(std::uint32_t error_code) {
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, lastPeerStream(), error_code, nullptr, 0);
}

std::int32_t H2Session::lastPeerStream() const {
  return std::max(0, nghttp2_session_get_last_proc_stream_id(session_));
}

}  // namespace sluice::proxy
