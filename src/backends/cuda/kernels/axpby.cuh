// out = a x + b y, and its backward (each input's share of the gradient).
// Kernels on top, launchers below. S: the activations' storage (common.cuh).
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// (16-byte packs where the pointers allow, then element by element: common.cuh.)
template <typename S>
STRATA_GLOBAL void k_axpby(S* out, const S* x, const S* y, int64_t n, compute_t<S> a,
                           compute_t<S> b) {
  constexpr int P = kPack<S>;
  const int64_t np = packs_aligned(out, x, y) ? n / P : 0;
  STRATA_GRID_LOOP(i, np) {
    const Pack<S> u = load_pack(x + i * P), v = load_pack(y + i * P);
    Pack<S> o;
    for (int j = 0; j < P; ++j) o.v[j] = act_store<S>(a * act_load(u.v[j]) + b * act_load(v.v[j]));
    store_pack(out + i * P, o);
  }
  STRATA_GRID_LOOP(t, n - np * P) {
    const int64_t i = np * P + t;
    out[i] = act_store<S>(a * act_load(x[i]) + b * act_load(y[i]));
  }
}

// dx += a dout, dy += b dout (either may be null).
template <typename S>
STRATA_GLOBAL void k_axpby_backward(S* dx, S* dy, const S* dout, int64_t n, compute_t<S> a,
                                    compute_t<S> b) {
  if (dx) add_scaled(dx, dout, n, a);
  if (dy) add_scaled(dy, dout, n, b);
}

// ------------------------------------------------------------------ launchers

template <typename T>
void axpby_forward(KernelContext<T>& k, ops::Act<T> out, ops::ActIn<T> x, ops::ActIn<T> y,
                   int64_t n, double a, double b) {
  if (n == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_axpby<S>, blocks_for(pack_threads<S>(n), 256), 256, 0, k.stream(),
                      out.template as<S>(), x.template as<const S>(), y.template as<const S>(), n,
                      T(a), T(b));
      },
      out, x, y);
}

template <typename T>
void axpby_backward(KernelContext<T>& k, ops::Act<T> dx, ops::Act<T> dy, ops::ActIn<T> dout,
                    int64_t n, double a, double b) {
  if (n == 0 || (!dx && !dy)) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_axpby_backward<S>, blocks_for(pack_threads<S>(n), 256), 256, 0, k.stream(),
                      dx.template as<S>(), dy.template as<S>(), dout.template as<const S>(), n,
                      T(a), T(b));
      },
      dx, dy, dout);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
