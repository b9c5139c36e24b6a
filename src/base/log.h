// Leveled logging to stderr. stdout belongs to command output (ids, JSON), never to logs.
#pragma once

#include <string>

#include "base/error.h"

namespace deltafin::base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kQuiet = 4 };

LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(Args&&... args) {
  if (log_level() <= LogLevel::kInfo)
    log_line(LogLevel::kInfo, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(Args&&... args) {
  if (log_level() <= LogLevel::kWarn)
    log_line(LogLevel::kWarn, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_level() <= LogLevel::kDebug)
    log_line(LogLevel::kDebug, str_cat(std::forward<Args>(args)...));
}

}  // namespace deltafin::base
