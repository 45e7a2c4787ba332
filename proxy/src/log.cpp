// The proxy's named logger.
#include "log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace sluice::proxy {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("proxy")) return existing;
    try {
      return spdlog::stderr_color_mt("proxy");
    } catch (const spdlog::spdlog_ex&) {
      // Registered concurrently by someone else.
      return spdlog::get("proxy");
    }
  }();
  return *logger;
}

}  // namespace sluice::proxy
