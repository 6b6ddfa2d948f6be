// RMSNorm forward and backward: a block per row (grid-stride over rows, block
// size a multiple of 32) for out and dx, chunked column sums for dw. Kernels
// on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"

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

// dw[c] += sum_n dout * x * rstd, as reduce.cuh's column sums: this kernel
// writes each chunk of rows' partial sums (blockIdx.y: the chunk).
template <typename T>
STRATA_GLOBAL void k_rmsnorm_dw_partials(T* partial, const T* dout, const T* x, const T* rstd,
                                         int64_t N, int C, int64_t chunk) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  const int64_t n0 = int64_t(blockIdx.y) * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
  T s = 0;
  for (int64_t n = n0; n < n1; ++n) s += dout[n * C + c] * x[n * C + c] * rstd[n];
  partial[int64_t(blockIdx.y) * C + c] = s;
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
  if (dw) {
    int64_t chunk;
    int chunks;
    T* partial = column_partials(k, N, C, &chunk, &chunks);
    STRATA_LAUNCH(k_rmsnorm_dw_partials<T>, dim3(blocks_for(C, 128), unsigned(chunks)), 128, 0,
                  k.stream(), partial, dout, x, rstd, N, C, chunk);
    STRATA_LAUNCH(k_finish_columns<T>, blocks_for(C, 128), 128, 0, k.stream(), dw,
                  static_cast<const T*>(partial), chunks, C);
  }
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
