// Diagnostics on stderr, filtered by $JITBMM_LOG: warn (problems only: a damaged or unusable cache, an override
// in use, a bad setting), info (the default: also tuning progress and summaries), debug (also every plan's chosen
// variant and where it came from, every NVRTC compilation and its time, disk cache hits and misses).
#pragma once

#include <string>

namespace jitbmm {

enum class LogLevel { warn = 0, info = 1, debug = 2 };

LogLevel parse_log_level(const std::string& text); // throws std::invalid_argument naming JITBMM_LOG
LogLevel log_level();                              // $JITBMM_LOG, read once; a bad value warns and means info
bool log_enabled(LogLevel level);
// "jitbmm: " or, under a launcher, "jitbmm [rank 3]: " (support/process_share.hpp): what every line starts with.
std::string log_prefix();
// "<prefix><message>" (warnings: "<prefix>warning: <message>") on stderr when the level is enabled.
void log_message(LogLevel level, const std::string& message);
// A warning said once per process for each `topic` (the first call's message), however often its condition recurs.
void warn_once(const std::string& topic, const std::string& message);

} // namespace jitbmm
