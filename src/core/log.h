// Logging to stderr. Messages are prefixed with the level; quiet mode drops info.
#pragma once

#include <string>

#include "core/error.h"

namespace strata::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_level(Level level);
Level level();
void write(Level level, const std::string& msg);

template <typename... Args>
void info(const Args&... args) {
  if (level() <= Level::Info) write(Level::Info, cat(args...));
}
template <typename... Args>
void warn(const Args&... args) {
  if (level() <= Level::Warn) write(Level::Warn, cat(args...));
}
template <typename... Args>
void debug(const Args&... args) {
  if (level() <= Level::Debug) write(Level::Debug, cat(args...));
}

}  // namespace strata::log
