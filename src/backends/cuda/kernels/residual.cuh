// Residual connection out = a + b; its backward passes dout to both inputs.
// Kernels on top, launchers below. S: the activations' storage (common.cuh).
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// (16-byte packs where the pointers allow, then element by element: common.cuh.)
template <typename S>
STRATA_GLOBAL void k_residual(S* out, const S* a, const S* b, int64_t n) {
  constexpr int P = kPack<S>;
  const int64_t np = packs_aligned(out, a, b) ? n / P : 0;
  STRATA_GRID_LOOP(i, np) {
    const Pack<S> x = load_pack(a + i * P), y = load_pack(b + i * P);
    Pack<S> o;
    for (int j = 0; j < P; ++j) o.v[j] = act_store<S>(act_load(x.v[j]) + act_load(y.v[j]));
    store_pack(out + i * P, o);
  }
  STRATA_GRID_LOOP(t, n - np * P) {
    const int64_t i = np * P + t;
    out[i] = act_store<S>(act_load(a[i]) + act_load(b[i]));
  }
}

template <typename S>
STRATA_GLOBAL void k_residual_backward(S* da, S* db, const S* dout, int64_t n) {
  if (da) add_scaled(da, dout, n, compute_t<S>(1));
  if (db) add_scaled(db, dout, n, compute_t<S>(1));
}

// ------------------------------------------------------------------ launchers

template <typename T>
void residual_forward(KernelContext<T>& k, ops::Act<T> out, ops::ActIn<T> a, ops::ActIn<T> b,
                      int64_t n) {
  if (n == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_residual<S>, blocks_for(pack_threads<S>(n), 256), 256, 0, k.stream(),
                      out.template as<S>(), a.template as<const S>(), b.template as<const S>(), n);
      },
      out, a, b);
}

template <typename T>
void residual_backward(KernelContext<T>& k, ops::Act<T> da, ops::Act<T> db, ops::ActIn<T> dout,
                       int64_t n) {
  if (n == 0 || (!da && !db)) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_residual_backward<S>, blocks_for(pack_threads<S>(n), 256), 256, 0,
                      k.stream(), da.template as<S>(), db.template as<S>(),
                      dout.template as<const S>(), n);
      },
      da, db, dout);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
