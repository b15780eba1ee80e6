#include "common/log.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/error.h"

namespace hdp {
namespace {

spdlog::level::level_enum parse_level(std::string_view text) {
  auto level = spdlog::level::from_str(std::string(text));
  // from_str maps anything it does not know to `off`; only "off" itself may mean off.
  if (level == spdlog::level::off && text != "off") {
    throw InvalidArgument("unknown log level '" + std::string(text) +
                          "' (expected trace, debug, info, warn, error, critical or off)");
  }
  return level;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = spdlog::stderr_color_mt("hdp");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%P] %v");
  spdlog::level::level_enum level = spdlog::level::info;
  if (const char* env = std::getenv("HDP_LOG_LEVEL"); env && *env) {
    try {
      level = parse_level(env);
    } catch (const InvalidArgument& e) {
      logger->warn("HDP_LOG_LEVEL: {}; using info", e.what());
    }
  }
  logger->set_level(level);
  return logger;
}

}  // namespace

std::shared_ptr<spdlog::logger> log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return logger;
}

void set_log_level(std::string_view level) { log()->set_level(parse_level(level)); }

}  // namespace hdp
