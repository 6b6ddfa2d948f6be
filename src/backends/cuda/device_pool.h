// DevicePool: the kernel backend's caching allocator of device memory. A
// training step allocates and frees the same sizes every step (activations,
// scratch, the optimizer's temporaries); cudaFree synchronises the whole
// device, which would stall the host and, with tensor parallelism, wait for
// NCCL kernels of other communicators in flight (docs/gpu.md, "GPU host
// hygiene"). So a freed block goes back to the pool, and the next request of
// its size class takes it: after the first step nothing reaches the driver.
// Blocks go back to the driver only in trim() (after a synchronisation) and
// when the pool is destroyed.
//
// Why reuse without a synchronisation is safe: every kernel, copy and GEMM
// that uses a block is queued on the backend's one stream, before the host
// frees the block; whoever takes the block next queues its work on the same
// stream, after the free, so the device runs it after the last use. Work on
// another stream (a communicator's) must be ordered back into the backend's
// stream before the block is freed: the communicators do that in wait()
// (an event the backend's stream waits on), and a buffer passed to an async
// collective may not be freed before wait() anyway (parallel/comm.h).
//
// Compiled in both builds (portable.h): over cudaMalloc / cudaFree, and over
// the SIMT executor's device_alloc / device_free, whose counters the tests
// read.
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>

#include "backends/cuda/portable.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

class DevicePool {
 public:
  explicit DevicePool(void* stream) : stream_(stream) {}
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  // The owner has synchronised the stream (KernelBackend's destructor).
  ~DevicePool() { release_cached(); }

  // A block of at least `bytes` (not zeroed), from the cache when one of its
  // size class is free, else from the driver; null for 0 bytes.
  void* take(size_t bytes) {
    if (!bytes) return nullptr;
    const size_t want = size_class(bytes);
    // A cached block at most a quarter larger: close sizes share blocks, a
    // small request does not pin a large block.
    auto it = free_.lower_bound(want);
    if (it != free_.end() && it->first <= want + want / 4) {
      void* p = it->second;
      live_.emplace(p, it->first);
      free_.erase(it);
      return p;
    }
    void* p = gpu::try_malloc_device(want);
    if (!p) {  // out of memory: give the cache back and try once more
      trim();
      p = gpu::malloc_device(want);
    }
    live_.emplace(p, want);
    return p;
  }
  // Returns a block from take() to the cache: no synchronisation, no free.
  void give(void* p) {
    if (!p) return;
    auto it = live_.find(p);
    STRATA_CHECK(it != live_.end(), "device pool: freeing memory it did not allocate (", p, ")");
    free_.emplace(it->second, p);
    live_.erase(it);
  }
  // Waits for the stream, then returns every cached block to the driver.
  void trim() {
    gpu::sync(stream_);
    release_cached();
  }
  size_t cached_bytes() const {
    size_t n = 0;
    for (const auto& e : free_) n += e.first;
    return n;
  }

 private:
  // 512-byte steps up to 1 MiB, then 128 KiB steps (at most 1/8 rounding
  // above 1 MiB): a step's recurring sizes map to the same classes.
  static size_t size_class(size_t bytes) {
    const size_t step = bytes <= (size_t(1) << 20) ? 512 : (size_t(128) << 10);
    return (bytes + step - 1) / step * step;
  }
  void release_cached() {
    for (auto& e : free_) gpu::free_device(e.second);
    free_.clear();
  }

  void* stream_;
  std::unordered_map<void*, size_t> live_;  // handed out: block -> its bytes
  std::multimap<size_t, void*> free_;       // cached: bytes -> block
};

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
