// Residual connection out = a + b; its backward passes dout to both inputs.
// Kernels on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
STRATA_GLOBAL void k_residual(T* out, const T* a, const T* b, int64_t n) {
  STRATA_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

template <typename T>
STRATA_GLOBAL void k_residual_backward(T* da, T* db, const T* dout, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const T g = dout[i];
    if (da) da[i] += g;
    if (db) db[i] += g;
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void residual_forward(KernelContext<T>& k, T* out, const T* a, const T* b, int64_t n) {
  if (n == 0) return;
  STRATA_LAUNCH(k_residual<T>, blocks_for(n, 256), 256, 0, k.stream(), out, a, b, n);
}

template <typename T>
void residual_backward(KernelContext<T>& k, T* da, T* db, const T* dout, int64_t n) {
  if (n == 0 || (!da && !db)) return;
  STRATA_LAUNCH(k_residual_backward<T>, blocks_for(n, 256), 256, 0, k.stream(), da, db, dout, n);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
