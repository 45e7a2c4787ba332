// The fixed list of named loggers (Envoy's ALL_LOGGER_IDS): one per component, created once,
// formatted as text or JSON lines for the whole process. Never log a secret value.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <string_view>

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

}  // namespace sluice::base
