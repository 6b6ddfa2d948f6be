#include "backends/cuda/kernel_times.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace strata::gpu {
namespace {

std::atomic<bool> g_on{false};
std::atomic<PendingFlush> g_flush{nullptr};
std::mutex g_mutex;
std::map<std::string, KernelTime>& totals() {
  static std::map<std::string, KernelTime> t;
  return t;
}

}  // namespace

void set_kernel_timing(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool kernel_timing() { return g_on.load(std::memory_order_relaxed); }

void add_kernel_time(const std::string& name, double ms) {
  std::lock_guard<std::mutex> lock(g_mutex);
  KernelTime& k = totals()[name];
  k.name = name;
  k.ms += ms;
  ++k.launches;
}

std::vector<KernelTime> take_kernel_times() {
  if (PendingFlush f = g_flush.load()) f();
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<KernelTime> out;
  for (auto& [name, k] : totals()) out.push_back(k);
  totals().clear();
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) {
    return a.ms != b.ms ? a.ms > b.ms : a.name < b.name;
  });
  return out;
}

void set_pending_flush(PendingFlush f) { g_flush.store(f); }

}  // namespace strata::gpu
