// CUDA runtime queries. Compiled only when the build finds nvcc
// (STRATA_HAVE_CUDA); the CUDA kernels of the ops interface land here.
#pragma once

#include "backends/cuda/gpu_peak.h"

namespace strata::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device.
int device_count();
// Runtime version as major*1000 + minor*10 (CUDA's encoding), 0 if unknown.
int runtime_version();
// Free memory of device `device` in bytes (cudaMemGetInfo); -1 if unknown.
long long free_memory(int device);
// The properties of device `device`; false when it cannot be queried.
bool device_properties(int device, GpuProperties* out);

}  // namespace strata::cuda
