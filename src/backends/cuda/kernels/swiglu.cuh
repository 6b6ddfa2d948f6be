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

// h[n, j] = silu(gate) * up with gateup[n] = [gate(F) | up(F)]. In 16-byte
// packs along j when F is a multiple of a pack and the pointers allow (a pack
// never crosses a row then), else element by element (common.cuh).
template <typename S>
STRATA_GLOBAL void k_swiglu(S* h, const S* gateup, int64_t N, int F) {
  using T = compute_t<S>;
  constexpr int P = kPack<S>;
  if (F % P == 0 && packs_aligned(h, gateup)) {
    STRATA_GRID_LOOP(i, N * F / P) {
      const int64_t n = i * P / F;
      const int j = int(i * P % F);
      const Pack<S> g = load_pack(gateup + n * 2 * F + j),
                    u = load_pack(gateup + n * 2 * F + F + j);
      Pack<S> o;
      for (int e = 0; e < P; ++e) {
        const T gv = act_load(g.v[e]);
        o.v[e] = act_store<S>(gv * sigmoid(gv) * act_load(u.v[e]));
      }
      store_pack(h + i * P, o);
    }
    return;
  }
  STRATA_GRID_LOOP(i, N * F) {
    const int64_t n = i / F;
    const int j = int(i % F);
    const T g = act_load(gateup[n * 2 * F + j]), u = act_load(gateup[n * 2 * F + F + j]);
    h[i] = act_store<S>(g * sigmoid(g) * u);
  }
}

// d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). Packs as the forward.
template <typename S>
STRATA_GLOBAL void k_swiglu_backward(S* dgateup, const S* dh, const S* gateup, int64_t N, int F) {
  using T = compute_t<S>;
  constexpr int P = kPack<S>;
  if (F % P == 0 && packs_aligned(dgateup, dh, gateup)) {
    STRATA_GRID_LOOP(i, N * F / P) {
      const int64_t n = i * P / F;
      const int j = int(i * P % F);
      const Pack<S> g = load_pack(gateup + n * 2 * F + j),
                    u = load_pack(gateup + n * 2 * F + F + j);
      const Pack<S> d = load_pack(dh + i * P);
      Pack<S> dg, du;
      for (int e = 0; e < P; ++e) {
        const T gv = act_load(g.v[e]), uv = act_load(u.v[e]), dv = act_load(d.v[e]);
        const T sv = sigmoid(gv);
        du.v[e] = act_store<S>(dv * gv * sv);
        dg.v[e] = act_store<S>(dv * uv * sv * (T(1) + gv * (T(1) - sv)));
      }
      store_pack(dgateup + n * 2 * F + F + j, du);
      store_pack(dgateup + n * 2 * F + j, dg);
    }
    return;
  }
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
        STRATA_LAUNCH(k_swiglu<S>, blocks_for(pack_threads<S>(N * F), 256), 256, 0, k.stream(),
                      h.template as<S>(), gateup.template as<const S>(), N, F);
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
        STRATA_LAUNCH(k_swiglu_backward<S>, blocks_for(pack_threads<S>(N * F), 256), 256, 0,
                      k.stream(), dgateup.template as<S>(), dh.template as<const S>(),
                      gateup.template as<const S>(), N, F);
      },
      dgateup, dh, gateup);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
