// SwiGLU activation of the Llama MLP, h = silu(gate) * up, and its backward.
// Kernels on top, launchers below. S: the activations' storage (common.cuh).
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
STRATA_DEVICE T sigmoid(T x) {
  return T(1) / (T(1) + g_exp(-x));
}

// h[n, j] = silu(gate) * up with gateup[n] = [gate(F) | up(F)].
template <typename S>
STRATA_GLOBAL void k_swiglu(S* h, const S* gateup, int64_t N, int F) {
  using T = compute_t<S>;
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = act_load(gateup[n * 2 * F + j]), u = act_load(gateup[n * 2 * F + F + j]);
    h[i] = act_store<S>(g * sigmoid(g) * u);
  }
}

// d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g).
template <typename S>
STRATA_GLOBAL void k_swiglu_backward(S* dgateup, const S* dh, const S* gateup, int64_t N, int F) {
  using T = compute_t<S>;
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = act_load(gateup[n * 2 * F + j]), u = act_load(gateup[n * 2 * F + F + j]);
    const T s = sigmoid(g), d = act_load(dh[i]);
    dgateup[n * 2 * F + F + j] = act_store<S>(d * g * s);
    dgateup[n * 2 * F + j] = act_store<S>(d * u * s * (T(1) + g * (T(1) - s)));
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void swiglu_forward(KernelContext<T>& k, ops::Act<T> h, ops::ActIn<T> gateup, int64_t N, int F) {
  if (N == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_swiglu<S>, blocks_for(N * F, 256), 256, 0, k.stream(), h.template as<S>(),
                      gateup.template as<const S>(), N, F);
      },
      h, gateup);
}

template <typename T>
void swiglu_backward(KernelContext<T>& k, ops::Act<T> dgateup, ops::ActIn<T> dh,
                     ops::ActIn<T> gateup, int64_t N, int F) {
  if (N == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_swiglu_backward<S>, blocks_for(N * F, 256), 256, 0, k.stream(),
                      dgateup.template as<S>(), dh.template as<const S>(),
                      gateup.template as<const S>(), N, F);
      },
      dgateup, dh, gateup);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
