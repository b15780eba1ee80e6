// File: common/log.h
//
// Logging through spdlog. The level comes from HDP_LOG_LEVEL (trace, debug, info, warn, error,
// critical, off; default info) and is read once, at the first call. Messages go to stderr so that
// stdout stays free for machine-readable output (`--json`).
//
// Example:
//   hdp::log()->info("generation {} published with {} members", gen, n);
#pragma once

#include <memory>
#include <string_view>

#include <spdlog/spdlog.h>

namespace hdp {

// The process-wide logger; thread-safe, never null.
std::shared_ptr<spdlog::logger> log();

// Overrides HDP_LOG_LEVEL; throws InvalidArgument naming the bad level.
void set_log_level(std::string_view level);

}  // namespace hdp
