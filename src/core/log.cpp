#include "core/log.h"

#include <cstdio>
#include <mutex>

namespace strata::log {
namespace {
Level g_level = Level::Info;
std::mutex g_mutex;
}  // namespace

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

void write(Level l, const std::string& msg) {
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (l == Level::Info)
    std::fprintf(stderr, "%s\n", msg.c_str());
  else
    std::fprintf(stderr, "%s: %s\n", names[static_cast<int>(l)], msg.c_str());
  std::fflush(stderr);
}

}  // namespace strata::log
