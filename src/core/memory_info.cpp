#include "core/memory_info.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace strata {
namespace {

// The first integer of a file ("max" or a missing file: -1).
int64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max") return -1;
  char* end = nullptr;
  const long long v = std::strtoll(word.c_str(), &end, 10);
  return end && *end == '\0' && v >= 0 ? int64_t(v) : -1;
}

int64_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

// This process's cgroup directories: v2 ("0::/path") under /sys/fs/cgroup,
// v1 ("N:memory:/path") under /sys/fs/cgroup/memory.
void cgroup_dirs(std::string* v2, std::string* v1) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("0::", 0) == 0) *v2 = "/sys/fs/cgroup" + line.substr(3);
    const size_t m = line.find(":memory:");
    if (m != std::string::npos) *v1 = "/sys/fs/cgroup/memory" + line.substr(m + 8);
  }
}

// Limit minus usage of the tightest cgroup from this process's up to the root.
int64_t cgroup_available(std::string* which) {
  int64_t best = -1;
  auto consider = [&](int64_t limit, int64_t usage, const char* name) {
    // v1 reports "no limit" as a huge number; anything past 2^60 is none.
    if (limit < 0 || limit >= (int64_t(1) << 60)) return;
    const int64_t left = usage >= 0 ? std::max<int64_t>(0, limit - usage) : limit;
    if (best < 0 || left < best) best = left, *which = name;
  };
  // Each directory from `dir` up to `root`.
  auto walk = [&](std::string dir, const std::string& root, const char* limit_file,
                  const char* usage_file, const char* name) {
    if (dir.empty()) return;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    for (int depth = 0; depth < 64 && dir.size() >= root.size(); ++depth) {
      consider(read_number(dir + "/" + limit_file), read_number(dir + "/" + usage_file), name);
      const size_t slash = dir.find_last_of('/');
      if (dir == root || slash == std::string::npos) break;
      dir = dir.substr(0, slash);
    }
  };
  std::string v2, v1;
  cgroup_dirs(&v2, &v1);
  walk(v2, "/sys/fs/cgroup", "memory.max", "memory.current", "cgroup memory.max");
  walk(v1, "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
       "cgroup memory.limit_in_bytes");
  return best;
}

// RLIMIT_AS (ulimit -v) minus the address space already mapped.
int64_t address_space_available() {
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0;
  f >> pages;
  const int64_t used = pages * int64_t(sysconf(_SC_PAGESIZE));
  return std::max<int64_t>(0, int64_t(rl.rlim_cur) - used);
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail(cat(what, ": bad size '", text, "' (e.g. 3GB, 500MB, 2GiB or bytes)"));
  }
  const std::string unit = text.substr(used);
  double k = 0;
  if (unit.empty() || unit == "B")
    k = 1;
  else if (unit == "kB" || unit == "KB")
    k = 1e3;
  else if (unit == "MB")
    k = 1e6;
  else if (unit == "GB")
    k = 1e9;
  else if (unit == "TB")
    k = 1e12;
  else if (unit == "KiB")
    k = 1024.0;
  else if (unit == "MiB")
    k = 1024.0 * 1024;
  else if (unit == "GiB")
    k = 1024.0 * 1024 * 1024;
  STRATA_CHECK(k > 0, what, ": bad size unit in '", text, "' (B, kB, MB, GB, TB, KiB, MiB, GiB)");
  STRATA_CHECK(std::isfinite(v) && v >= 0 && v * k < 9e18, what, ": size '", text,
               "' is out of range");
  return int64_t(v * k);
}

MemoryLimit host_memory_available() {
  if (const char* env = std::getenv("STRATA_MEMORY_LIMIT"); env && *env)
    return {parse_bytes(env, "STRATA_MEMORY_LIMIT"), "STRATA_MEMORY_LIMIT"};
  MemoryLimit m;
  auto consider = [&](int64_t bytes, const std::string& source) {
    if (bytes >= 0 && (m.bytes < 0 || bytes < m.bytes)) m = {bytes, source};
  };
  consider(meminfo_available(), "MemAvailable");
  std::string which;
  const int64_t cg = cgroup_available(&which);
  consider(cg, which);
  consider(address_space_available(), "ulimit -v");
  return m;
}

namespace {
// A "Name:   123 kB" line of /proc/self/status, in bytes (0 when absent).
int64_t status_bytes(const char* name) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(name);
  while (std::getline(f, line))
    if (line.compare(0, n, name) == 0 && line.size() > n && line[n] == ':')
      return std::atoll(line.c_str() + n + 1) * 1024;  // kB
  return 0;
}
}  // namespace

int64_t process_rss_bytes() { return status_bytes("VmRSS"); }

int64_t peak_rss_bytes() { return status_bytes("VmHWM"); }

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e12)
    std::snprintf(buf, sizeof buf, "%.2f TB", b / 1e12);
  else if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

}  // namespace strata
