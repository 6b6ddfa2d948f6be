// out = a x + b y, and its backward (each input's share of the gradient).
// Kernels on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
STRATA_GLOBAL void k_axpby(T* out, const T* x, const T* y, int64_t n, T a, T b) {
  STRATA_GRID_LOOP(i, n) out[i] = a * x[i] + b * y[i];
}

// dx += a dout, dy += b dout (either may be null).
template <typename T>
STRATA_GLOBAL void k_axpby_backward(T* dx, T* dy, const T* dout, int64_t n, T a, T b) {
  STRATA_GRID_LOOP(i, n) {
    const T g = dout[i];
    if (dx) dx[i] += a * g;
    if (dy) dy[i] += b * g;
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void axpby_forward(KernelContext<T>& k, T* out, const T* x, const T* y, int64_t n, double a,
                   double b) {
  if (n == 0) return;
  STRATA_LAUNCH(k_axpby<T>, blocks_for(n, 256), 256, 0, k.stream(), out, x, y, n, T(a), T(b));
}

template <typename T>
void axpby_backward(KernelContext<T>& k, T* dx, T* dy, const T* dout, int64_t n, double a,
                    double b) {
  if (n == 0 || (!dx && !dy)) return;
  STRATA_LAUNCH(k_axpby_backward<T>, blocks_for(n, 256), 256, 0, k.stream(), dx, dy, dout, n, T(a),
                T(b));
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
