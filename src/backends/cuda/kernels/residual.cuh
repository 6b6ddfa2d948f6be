// Residual connection out = a + b; its backward passes dout to both inputs.
// Kernels on top, launchers below. S: the activations' storage (common.cuh).
#pragma once

#include "backends/cuda/kernels/context.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename S>
STRATA_GLOBAL void k_residual(S* out, const S* a, const S* b, int64_t n) {
  STRATA_GRID_LOOP(i, n) out[i] = act_store<S>(act_load(a[i]) + act_load(b[i]));
}

template <typename S>
STRATA_GLOBAL void k_residual_backward(S* da, S* db, const S* dout, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const compute_t<S> g = act_load(dout[i]);
    if (da) da[i] = act_store<S>(act_load(da[i]) + g);
    if (db) db[i] = act_store<S>(act_load(db[i]) + g);
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void residual_forward(KernelContext<T>& k, ops::Act<T> out, ops::ActIn<T> a, ops::ActIn<T> b,
                      int64_t n) {
  if (n == 0) return;
  ops::with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        STRATA_LAUNCH(k_residual<S>, blocks_for(n, 256), 256, 0, k.stream(), out.template as<S>(),
                      a.template as<const S>(), b.template as<const S>(), n);
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
        STRATA_LAUNCH(k_residual_backward<S>, blocks_for(n, 256), 256, 0, k.stream(),
                      da.template as<S>(), db.template as<S>(), dout.template as<const S>(), n);
      },
      da, db, dout);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
