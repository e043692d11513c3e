#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace fleetps {

Status SetUpLogging(const LoggingOptions& options) {
  const auto level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    return Status::InvalidArgument("unknown log level '" + options.level +
                                   "' (use trace, debug, info, warn, error or off)");
  }
  // Not registered by name, so SetUpLogging may be called again (tests, restarts).
  auto logger = std::make_shared<spdlog::logger>(options.name.empty() ? "fleetps" : options.name,
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern(options.name.empty() ? "%Y-%m-%d %H:%M:%S.%e %^%l%$ %v"
                                           : "%Y-%m-%d %H:%M:%S.%e %^%l%$ [" + options.name + "] %v");
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return Status::OK();
}

}  // namespace fleetps
