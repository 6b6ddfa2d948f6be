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
// the transpose (backward). S: the activations' storage (common.cuh). A
// thread rotates W pairs (i, i + D/2) of consecutive i: W = kPack<S> (16-byte
// loads and stores of both halves and of the tables' runs) when the launcher
// found every run aligned, else 1.
template <typename S, int W>
STRATA_DEVICE void rope_run(S* x, const compute_t<S>* cos_t, const compute_t<S>* sin_t, int B,
                            int T_, int H, int D, int64_t row_stride, int pos0, compute_t<S> sign) {
  using T = compute_t<S>;
  const int half = D / 2, runs = half / W;
  const int64_t total = int64_t(B) * T_ * H * runs;
  STRATA_GRID_LOOP(e, total) {
    const int i = int(e % runs) * W;
    const int h = int((e / runs) % H);
    const int64_t bt = e / (int64_t(runs) * H);
    const int t = int(bt % T_);
    S* lo = x + bt * row_stride + int64_t(h) * D + i;
    S* hi = lo + half;
    const int64_t tab = int64_t(pos0 + t) * half + i;
    T a[W], b[W], c[W], sn[W];
    if constexpr (W > 1) {
      load_run(a, lo);
      load_run(b, hi);
      load_run(c, cos_t + tab);
      load_run(sn, sin_t + tab);
    } else {
      a[0] = act_load(*lo);
      b[0] = act_load(*hi);
      c[0] = cos_t[tab];
      sn[0] = sin_t[tab];
    }
    T ra[W], rb[W];
    for (int j = 0; j < W; ++j) {
      const T sj = sign * sn[j];
      ra[j] = a[j] * c[j] - b[j] * sj;
      rb[j] = b[j] * c[j] + a[j] * sj;
    }
    if constexpr (W > 1) {
      store_run(lo, ra);
      store_run(hi, rb);
    } else {
      *lo = act_store<S>(ra[0]);
      *hi = act_store<S>(rb[0]);
    }
  }
}

template <typename S>
STRATA_GLOBAL void k_rope(S* x, const compute_t<S>* cos_t, const compute_t<S>* sin_t, int B, int T_,
                          int H, int D, int64_t row_stride, int pos0, compute_t<S> sign,
                          bool packs) {
  if (packs)
    rope_run<S, kPack<S>>(x, cos_t, sin_t, B, T_, H, D, row_stride, pos0, sign);
  else
    rope_run<S, 1>(x, cos_t, sin_t, B, T_, H, D, row_stride, pos0, sign);
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
        // Runs of a pack: half a head, the row stride and the tables' rows
        // whole packs, and x and the tables 16-byte aligned.
        constexpr int P = kPack<S>;
        const bool packs = (D / 2) % P == 0 && (D / 2) % kPack<T> == 0 && row_stride % P == 0 &&
                           packs_aligned(x.template as<S>(), cos, sin);
        STRATA_LAUNCH(k_rope<S>, blocks_for(packs ? n / P : n, 256), 256, 0, k.stream(),
                      x.template as<S>(), cos, sin, B, T_, H, D, row_stride, pos0, sign, packs);
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
