// Bias add over rows, and its backward: column sums of dout (a thread per
// column, coalesced across a warp; rows in order, so deterministic). Kernels
// on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// out[r * ld + j] += bias[j].
template <typename T>
STRATA_GLOBAL void k_bias_add(T* out, const T* bias, int64_t N, int OC, int64_t ld) {
  STRATA_GRID_LOOP(i, N * OC) {
    const int64_t r = i / OC;
    const int j = int(i % OC);
    out[r * ld + j] += bias[j];
  }
}

// dst[j] += sum over rows r of src[r * ld + j].
template <typename T>
STRATA_GLOBAL void k_column_sums(T* dst, const T* src, int64_t N, int OC, int64_t ld) {
  const int j = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= OC) return;
  T s = 0;
  for (int64_t r = 0; r < N; ++r) s += src[r * ld + j];
  dst[j] += s;
}

// ------------------------------------------------------------------ launchers

template <typename T>
void bias_add_forward(KernelContext<T>& k, T* out, const T* bias, int64_t N, int OC, int64_t ld) {
  if (N == 0) return;
  STRATA_LAUNCH(k_bias_add<T>, blocks_for(N * OC, 256), 256, 0, k.stream(), out, bias, N, OC,
                ld ? ld : OC);
}

template <typename T>
void bias_add_backward(KernelContext<T>& k, T* dbias, const T* dout, int64_t N, int OC,
                       int64_t ld) {
  if (N == 0) return;
  STRATA_LAUNCH(k_column_sums<T>, blocks_for(OC, 128), 128, 0, k.stream(), dbias, dout, N, OC,
                ld ? ld : OC);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
