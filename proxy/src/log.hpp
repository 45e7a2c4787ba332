// The proxy's named spdlog logger ("proxy").
#pragma once

#include <spdlog/spdlog.h>

#include <exception>

#include "sluice/base/log.hpp"

namespace sluice::proxy {

/// The "proxy" logger (base's named logger).
inline spdlog::logger& log() { return base::logger(base::LoggerId::kProxy); }

/// The completion handler of every connection coroutine: the data plane never throws on
/// purpose, so anything that escapes is logged with `what` and the connection just ends.
struct LogEscapedException {
  const char* what;
  void operator()(std::exception_ptr e) const {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      log().error("{} ended by an unexpected exception: {}", what, x.what());
    } catch (...) {
      log().error("{} ended by an unexpected exception", what);
    }
  }
};

}  // namespace sluice::proxy
