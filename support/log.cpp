#include "support/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>

#include "support/enum_names.hpp"
#include "support/env_words.hpp"
#include "support/process_share.hpp"

namespace jitbmm {

namespace {
constexpr EnumName<LogLevel> kLogLevels[] = {
    {LogLevel::warn, "warn"}, {LogLevel::info, "info"}, {LogLevel::debug, "debug"}};
} // namespace

LogLevel parse_log_level(const std::string& text) {
  if (const auto* row = find_env_word(kLogLevels, text)) return row->value;
  throw std::invalid_argument("JITBMM_LOG: expected " + name_list(kLogLevels) + ", got '" + text + "'");
}

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* v = std::getenv("JITBMM_LOG");
    if (!v || !*v) return LogLevel::info;
    try {
      return parse_log_level(v);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "jitbmm: warning: %s; using info\n", e.what());
      return LogLevel::info;
    }
  }();
  return level;
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(log_level()); }

std::string log_prefix() {
  const std::string tag = rank_tag();
  return tag.empty() ? "jitbmm: " : "jitbmm [" + tag + "]: ";
}

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::fprintf(stderr, "%s%s%s\n", log_prefix().c_str(), level == LogLevel::warn ? "warning: " : "", message.c_str());
}

void warn_once(const std::string& topic, const std::string& message) {
  static std::mutex mutex;
  // never destroyed: a background build may still use it as the process exits
  static std::set<std::string>& said = *new std::set<std::string>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(topic).second) return;
  }
  log_message(LogLevel::warn, message);
}

} // namespace jitbmm
