// How much memory this process may still allocate, and byte counts for people.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// The memory left to this process: the least of the machine's MemAvailable
// (/proc/meminfo), its cgroup's limit minus its usage (cgroup v2 memory.max
// and memory.current, or v1 memory.limit_in_bytes and memory.usage_in_bytes)
// and `ulimit -v` minus the address space in use. `source` names the bound
// that decided ("MemAvailable", "cgroup memory.max", "ulimit -v", or
// "STRATA_MEMORY_LIMIT" when that variable sets the figure: bytes, or with a
// unit, e.g. 3GB); bytes < 0 when nothing could be read.
struct MemoryLimit {
  int64_t bytes = -1;
  std::string source;
};
MemoryLimit host_memory_available();

// This process's resident memory now (VmRSS of /proc/self/status; 0 when it
// cannot be read): before a model is built, what the program and its
// libraries take.
int64_t process_rss_bytes();
// The most resident memory this process has held so far (VmHWM of
// /proc/self/status; 0 when it cannot be read).
int64_t peak_rss_bytes();

// "1.65 GB", "512.0 MB", "12.3 kB", "96 B" (decimal units).
std::string human_bytes(double bytes);

// Parses "3GB", "500MB", "2GiB", "1048576" (bytes); throws strata::Error
// naming `what` on anything else.
int64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace strata
