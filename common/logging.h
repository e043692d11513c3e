#pragma once
// Logging set-up: the only place spdlog is configured. Everything else calls
// spdlog::info/warn/... on the default logger.

#include <string>

#include "common/status.h"

namespace fleetps {

struct LoggingOptions {
  std::string level = "info";  // trace | debug | info | warn | error | off
  std::string name;            // process tag printed on each line, e.g. "pserver:0"
};

// Configures the default spdlog logger (stderr, "time level [name] message").
Status SetUpLogging(const LoggingOptions& options);

}  // namespace fleetps
