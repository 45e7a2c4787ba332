// The proxy's named spdlog logger ("proxy").
#pragma once

#include <spdlog/spdlog.h>

namespace sluice::proxy {

/// The "proxy" logger; created on first use (stderr) unless the CLI registered one.
spdlog::logger& log();

}  // namespace sluice::proxy
