// Log sink: one line per call, written with a single fputs so lines from threads do not interleave.
#include "base/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deltafin::base {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("DELTAFIN_LOG");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  if (std::strcmp(env, "quiet") == 0) return LogLevel::kQuiet;
  return LogLevel::kInfo;
}

}  // namespace

LogLevel log_level() {
  static const LogLevel level = initial_level();  // DELTAFIN_LOG, read once
  return level;
}

void log_line(LogLevel level, const std::string& message) {
  static const char* const kTags[] = {"debug", "info", "warn", "error", ""};
  std::string line = "deltafin ";
  line += kTags[static_cast<int>(level)];
  line += ": ";
  line += message;
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

}  // namespace deltafin::base
