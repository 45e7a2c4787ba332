// The one Asio/Beast include. <utility> must come first: g++ 12 with Boost 1.74 otherwise
// fails to compile Asio's coroutine support (asio#944). Include it only where I/O happens.
#pragma once

// clang-format off
#include <utility>  // first: asio#944
// clang-format on

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sluice {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using unix_stream = net::local::stream_protocol;
using ErrorCode = boost::system::error_code;
}  // namespace sluice
