#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/portable.h"

namespace strata::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error on machines without a driver
    return 0;
  }
  return n;
}

int runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

long long free_memory(int device) {
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) return -1;
  if (current != device && cudaSetDevice(device) != cudaSuccess) return -1;
  size_t free_bytes = 0, total = 0;
  const bool ok = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess;
  if (current != device) cudaSetDevice(current);
  if (!ok) cudaGetLastError();
  return ok ? static_cast<long long>(free_bytes) : -1;
}

}  // namespace strata::cuda

namespace strata::gpu {
inline namespace device {
namespace {

struct Pending {
  const char* name;
  cudaEvent_t start, stop;
};
std::mutex g_pending_mutex;
std::vector<Pending> g_pending;

// Waits for the recorded events and moves their times into the totals.
void flush_pending() {
  std::vector<Pending> done;
  {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    done.swap(g_pending);
  }
  for (const Pending& p : done) {
    float ms = 0;
    if (cudaEventSynchronize(p.stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess)
      add_kernel_time(p.name, double(ms));
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.stop);
  }
  cudaGetLastError();
}

}  // namespace

void* record_timing_event(void* stream) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate");
  check(cudaEventRecord(e, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  return e;
}

void add_pending_time(const char* name, void* start, void* stop) {
  static const bool registered = (set_pending_flush(flush_pending), true);
  (void)registered;
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  g_pending.push_back({name, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)});
}

}  // namespace device
}  // namespace strata::gpu

namespace strata::cuda {

bool device_properties(int device, GpuProperties* out) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  GpuProperties& p = *out;
  p.name = prop.name;
  p.major = prop.major;
  p.minor = prop.minor;
  p.multiprocessors = prop.multiProcessorCount;
  p.memory_bytes = static_cast<long long>(prop.totalGlobalMem);
  p.l2_bytes = prop.l2CacheSize;
  p.memory_bus_bits = prop.memoryBusWidth;
  p.shared_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  // The clocks left cudaDeviceProp in CUDA 13: read them as attributes.
  cudaDeviceGetAttribute(&p.clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&p.memory_clock_khz, cudaDevAttrMemoryClockRate, device);
  cudaGetLastError();
  return true;
}

}  // namespace strata::cuda
