// Factories of the kernel backends (backends/cuda/kernel_backend.h), called
// by ops::make_backend:
//   "simt": the CUDA kernels on the CPU SIMT executor, GEMMs on the CPU GEMM
//           library (always built: the tests run every CUDA kernel this way);
//   "cuda": the same kernels on a GPU, GEMMs on cuBLASLt (STRATA_HAVE_CUDA).
#pragma once

#include <memory>

#include "ops/backend.h"

namespace strata::cuda {

template <typename T>
std::unique_ptr<ops::Backend<T>> make_simt_backend();

#if defined(STRATA_HAVE_CUDA)
// On CUDA device `device` (-1: the current one), with its own stream.
template <typename T>
std::unique_ptr<ops::Backend<T>> make_cuda_backend(int device = -1);
#endif

}  // namespace strata::cuda
