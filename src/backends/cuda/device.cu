#include <cuda_runtime.h>

#include "backends/cuda/device.h"

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
