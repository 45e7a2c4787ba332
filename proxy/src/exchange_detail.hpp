// Small helpers shared by the two halves of the exchange pipeline (exchange.cpp: reading and
// deciding; exchange_forward.cpp: forwarding and relaying).
#pragma once

#include <string>
#include <string_view>

#include "sluice/base/net_tls.hpp"

namespace sluice::proxy::exchange_detail {

inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

inline bool iequals(beast::string_view a, beast::string_view b) { return beast::iequals(a, b); }

// Request text quoted in rows and refusals is clipped.
inline std::string clip(std::string_view s) { return std::string(s.substr(0, 255)); }
inline std::string clip(beast::string_view s) { return clip(std::string_view(s.data(), s.size())); }
inline std::string clip(const std::string& s) { return s.substr(0, 255); }

// The ending of a message read: a client that went away is not a malformed request.
inline bool peerGone(const ErrorCode& ec) {
  return ec == net::error::eof || ec == http::error::end_of_stream ||
         ec == net::error::operation_aborted || ec == net::error::connection_reset ||
         ec == net::ssl::error::stream_truncated || ec == http::error::partial_message;
}

}  // namespace sluice::proxy::exchange_detail
