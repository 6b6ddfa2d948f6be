// RMSNorm forward and backward: a block per row (grid-stride over rows, block
// size a multiple of 32) for out and dx, a thread per column for dw. Kernels
// on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T>
STRATA_GLOBAL void k_rmsnorm(T* out, T* rstd, const T* x, const T* w, int64_t N, int C, T eps) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    T ss = 0;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) ss += xr[c] * xr[c];
    ss = block_sum(ss);
    const T r = T(1) / g_sqrt(ss / T(C) + eps);
    if (threadIdx.x == 0) rstd[n] = r;
    T* o = out + n * C;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) o[c] = xr[c] * r * w[c];
  }
}

// dx += rstd g w - rstd^3 mean(g w x) x  with g = dout.
template <typename T>
STRATA_GLOBAL void k_rmsnorm_backward_dx(T* dx, const T* dout, const T* x, const T* w,
                                         const T* rstd, int64_t N, int C) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T *xr = x + n * C, *g = dout + n * C;
    T dot = 0;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) dot += g[c] * w[c] * xr[c];
    dot = block_sum(dot);
    const T r = rstd[n];
    const T k = r * r * r * dot / T(C);
    T* d = dx + n * C;
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) d[c] += r * g[c] * w[c] - k * xr[c];
  }
}

// dw[c] += sum_n dout * x * rstd: a thread per column, rows in order.
template <typename T>
STRATA_GLOBAL void k_rmsnorm_backward_dw(T* dw, const T* dout, const T* x, const T* rstd, int64_t N,
                                         int C) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  T s = 0;
  for (int64_t n = 0; n < N; ++n) s += dout[n * C + c] * x[n * C + c] * rstd[n];
  dw[c] += s;
}

// ------------------------------------------------------------------ launchers

template <typename T>
void rmsnorm_forward(KernelContext<T>& k, T* out, T* rstd, const T* x, const T* w, int64_t N,
                     int C, double eps) {
  if (N == 0) return;
  STRATA_LAUNCH(k_rmsnorm<T>, blocks_for(N, 1, 8192), row_threads(C), 0, k.stream(), out, rstd, x,
                w, N, C, T(eps));
}

template <typename T>
void rmsnorm_backward(KernelContext<T>& k, T* dx, T* dw, const T* dout, const T* x, const T* w,
                      const T* rstd, int64_t N, int C) {
  if (N == 0) return;
  if (dx)
    STRATA_LAUNCH(k_rmsnorm_backward_dx<T>, blocks_for(N, 1, 8192), row_threads(C), 0, k.stream(),
                  dx, dout, x, w, rstd, N, C);
  if (dw)
    STRATA_LAUNCH(k_rmsnorm_backward_dw<T>, blocks_for(C, 128), 128, 0, k.stream(), dw, dout, x,
                  rstd, N, C);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
