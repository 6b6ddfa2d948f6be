// Rotary position embedding, rotate-half layout (Hugging Face Llama): the
// cos/sin tables, and the rotation in place (its backward is the rotation by
// the negative angle). Kernels on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "core/error.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// cos/sin[p, i] of angle p * inv_freq[i], computed in double.
template <typename T>
STRATA_GLOBAL void k_rope_table(T* cos_t, T* sin_t, int max_pos, int half, const double* inv_freq) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t(max_pos) * half;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double a = double(i / half) * inv_freq[i % half];
    cos_t[i] = T(cos(a));
    sin_t[i] = T(sin(a));
  }
}

// In place on the first H heads of B*T rows `row_stride` apart; sign -1 is
// the transpose (backward). S: the activations' storage (common.cuh).
template <typename S>
STRATA_GLOBAL void k_rope(S* x, const compute_t<S>* cos_t, const compute_t<S>* sin_t, int B, int T_,
                          int H, int D, int64_t row_stride, int pos0, compute_t<S> sign) {
  using T = compute_t<S>;
  const int half = D / 2;
  const int64_t total = int64_t(B) * T_ * H * half;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(e % half);
    const int h = int((e / half) % H);
    const int64_t bt = e / (int64_t(half) * H);
    const int t = int(bt % T_);
    S* lo = x + bt * row_stride + int64_t(h) * D + i;
    S* hi = lo + half;
    const T c = cos_t[int64_t(pos0 + t) * half + i], s = sign * sin_t[int64_t(pos0 + t) * half + i];
    const T a = act_load(*lo), b = act_load(*hi);
    *lo = act_store<S>(a * c - b * s);
    *hi = act_store<S>(b * c + a * s);
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void rope_table(KernelContext<T>& k, T* cos, T* sin, int max_pos, int D, const double* inv_freq) {
  STRATA_CHECK(D % 2 == 0, "RoPE needs an even head dimension, got ", D);
  const int half = D / 2;
  auto* f = static_cast<double*>(k.scratch(kFreq, size_t(half) * sizeof(double)));
  gpu::copy_async(f, inv_freq, size_t(half) * sizeof(double), k.stream());
  STRATA_LAUNCH(k_rope_table<T>, blocks_for(int64_t(max_pos) * half, 256), 256, 0, k.stream(), cos,
                sin, max_pos, half, static_cast<const double*>(f));
  gpu::sync(k.stream());  // the host's frequencies may go away
}

// The rotation (sign 1) or its transpose (sign -1).
template <typename T>
void rope_rotate(KernelContext<T>& k, ops::Act<T> x, const T* cos, const T* sin, int B, int T_,
                 int H, int D, int64_t row_stride, int pos0, T sign) {
  const int64_t n = int64_t(B) * T_ * H * (D / 2);
  if (n == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_rope<S>, blocks_for(n, 256), 256, 0, k.stream(), x.template as<S>(), cos,
                      sin, B, T_, H, D, row_stride, pos0, sign);
      },
      x);
}

template <typename T>
void rope_forward(KernelContext<T>& k, ops::Act<T> x, const T* cos, const T* sin, int B, int T_,
                  int H, int D, int64_t row_stride, int pos0) {
  rope_rotate<T>(k, x, cos, sin, B, T_, H, D, row_stride, pos0, T(1));
}

template <typename T>
void rope_backward(KernelContext<T>& k, ops::Act<T> dx, const T* cos, const T* sin, int B, int T_,
                   int H, int D, int64_t row_stride, int pos0) {
  rope_rotate<T>(k, dx, cos, sin, B, T_, H, D, row_stride, pos0, T(-1));
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
