// SwiGLU activation of the Llama MLP, h = silu(gate) * up, and its backward.
// Kernels on top, launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
STRATA_DEVICE T sigmoid(T x) {
  return T(1) / (T(1) + g_exp(-x));
}

// h[n, j] = silu(gate) * up with gateup[n] = [gate(F) | up(F)].
template <typename T>
STRATA_GLOBAL void k_swiglu(T* h, const T* gateup, int64_t N, int F) {
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = gateup[n * 2 * F + j], u = gateup[n * 2 * F + F + j];
    h[i] = g * sigmoid(g) * u;
  }
}

// d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g).
template <typename T>
STRATA_GLOBAL void k_swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) {
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = gateup[n * 2 * F + j], u = gateup[n * 2 * F + F + j];
    const T s = sigmoid(g), d = dh[i];
    dgateup[n * 2 * F + F + j] = d * g * s;
    dgateup[n * 2 * F + j] = d * u * s * (T(1) + g * (T(1) - s));
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void swiglu_forward(KernelContext<T>& k, T* h, const T* gateup, int64_t N, int F) {
  if (N == 0) return;
  STRATA_LAUNCH(k_swiglu<T>, blocks_for(N * F, 256), 256, 0, k.stream(), h, gateup, N, F);
}

template <typename T>
void swiglu_backward(KernelContext<T>& k, T* dgateup, const T* dh, const T* gateup, int64_t N,
                     int F) {
  if (N == 0) return;
  STRATA_LAUNCH(k_swiglu_backward<T>, blocks_for(N * F, 256), 256, 0, k.stream(), dgateup, dh,
                gateup, N, F);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
