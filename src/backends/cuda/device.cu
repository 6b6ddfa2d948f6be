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

}  // namespace strata::cuda
