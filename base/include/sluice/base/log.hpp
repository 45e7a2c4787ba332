// The fixed list of named loggers (Envoy's ALL_LOGGER_IDS): one per component, created once,
// formatted as text or JSON lines for the whole process. Never log a secret value.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/base/error.hpp"

namespace sluice::base {

enum class LoggerId : std::uint8_t { kPolicy, kProxy, kRunner, kAudit, kServe, kMcp, kCli };

/// The logger's name as it appears in every line: "policy", "proxy", ...
std::string_view loggerName(LoggerId id);

/// The component's logger (stderr); the same object for the life of the process.
spdlog::logger& logger(LoggerId id);

enum class LogFormat : std::uint8_t { kText, kJson };

/// Sets the format of every logger of the process, the default one included (`--log-format`).
/// Levels are spdlog's own (spdlog::set_level), which reach these loggers too.
void setLogFormat(LogFormat format);

/// Every logger of the process writes to `path` (appended, created 0600) instead of stderr.
/// Returns an error naming the file when it cannot be opened.
Result<void> setLogFile(const std::string& path);

/// The level of every logger: trace, debug, info, warn, error, critical or off.
Result<void> setLogLevel(std::string_view level);

}  // namespace sluice::base
