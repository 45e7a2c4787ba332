// The TLS half of the one Asio/Beast include (net.hpp). Only files that speak TLS include it,
// so OpenSSL's headers stay out of every other translation unit.
#pragma once

#include "sluice/base/net.hpp"

// clang-format off
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
// clang-format on
