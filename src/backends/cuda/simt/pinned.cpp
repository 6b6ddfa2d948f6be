// The SIMT backend's model of page-locked host memory (simt.h, "pinned host
// memory"): which async copies may still read or write a pinned buffer, and
// the stream synchronisations and event waits that complete them.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "backends/cuda/simt/simt.h"
#include "core/error.h"

namespace strata::simt {
namespace {
std::atomic<uint64_t> g_syncs{0};
}  // namespace

uint64_t sync_count() { return g_syncs.load(); }

namespace {

struct Pinned {
  size_t bytes = 0;
  std::string name;
  uint64_t last_copy = 0;  // sequence number of the last copy touching it (0: none)
};
std::mutex g_pin_mutex;
std::map<uintptr_t, Pinned> g_pinned;  // start -> buffer
uint64_t g_copy_seq = 0;               // copies touching pinned memory so far
uint64_t g_completed = 0;              // copies known complete (sync or event wait)

// The pinned buffer holding address a, or end.
std::map<uintptr_t, Pinned>::iterator pinned_at(uintptr_t a) {
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return g_pinned.end();
  --it;
  return a < it->first + std::max<size_t>(it->second.bytes, 1) ? it : g_pinned.end();
}

void check_idle_locked(const Pinned& b, const char* what) {
  STRATA_CHECK(b.last_copy <= g_completed, what, " pinned buffer '", b.name,
               "' while an async copy from or to it may still run (no stream synchronisation "
               "or event wait since the copy; on a GPU the DMA would read freed or rewritten "
               "memory)");
}

}  // namespace

void* pinned_alloc(size_t bytes, const char* name) {
  void* p = std::malloc(std::max<size_t>(bytes, 1));
  STRATA_CHECK(p, "SIMT backend: out of memory allocating ", bytes, " pinned bytes");
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  g_pinned[reinterpret_cast<uintptr_t>(p)] = Pinned{bytes, name, 0};
  return p;
}

void pinned_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(g_pin_mutex);
    auto it = g_pinned.find(reinterpret_cast<uintptr_t>(p));
    STRATA_CHECK(it != g_pinned.end(), "SIMT backend: free_host of memory that is not pinned");
    check_idle_locked(it->second, "freeing the");
    g_pinned.erase(it);
  }
  std::free(p);
}

void note_async_copy(const void* host, size_t bytes) {
  if (!bytes) return;
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  if (g_pinned.empty()) return;
  auto it = pinned_at(reinterpret_cast<uintptr_t>(host));
  if (it != g_pinned.end()) it->second.last_copy = ++g_copy_seq;
}

void check_pinned_idle(const void* p, const char* what) {
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  auto it = pinned_at(reinterpret_cast<uintptr_t>(p));
  if (it != g_pinned.end()) check_idle_locked(it->second, what);
}

uint64_t record_event() {
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  return g_copy_seq;
}

void wait_event(uint64_t event) {
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  g_completed = std::max(g_completed, event);
}

void note_sync() {
  refuse_while_capturing("a host synchronisation");
  ++g_syncs;
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  g_completed = g_copy_seq;
}

}  // namespace strata::simt
