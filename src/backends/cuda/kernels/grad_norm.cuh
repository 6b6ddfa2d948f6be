// Global-norm gradient clipping: the sum of squares into a scalar
// accumulator on the stream (reduce.cuh), and scaling in place. Kernel on
// top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
STRATA_GLOBAL void k_scale(T* x, int64_t n, T s) {
  STRATA_GRID_LOOP(i, n) x[i] *= s;
}

// ------------------------------------------------------------------ launchers

template <typename T>
void sum_squares(KernelContext<T>& k, double* acc, const T* x, int64_t n) {
  if (n == 0) return;
  add_sum(k, acc, x, static_cast<const T*>(nullptr), n, 0, 1.0);
}

template <typename T>
void scale_inplace(KernelContext<T>& k, T* x, int64_t n, double s) {
  if (n == 0) return;
  STRATA_LAUNCH(k_scale<T>, blocks_for(n, 256), 256, 0, k.stream(), x, n, T(s));
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
