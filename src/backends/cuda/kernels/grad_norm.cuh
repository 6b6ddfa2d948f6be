// Global-norm gradient clipping: the sum of squares into a scalar
// accumulator on the stream (reduce.cuh); AdamW applies the factor
// (adamw.cuh).
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
void sum_squares(KernelContext<T>& k, double* acc, const T* x, int64_t n) {
  if (n == 0) return;
  add_sum(k, acc, x, static_cast<const T*>(nullptr), n, 0, 1.0);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
