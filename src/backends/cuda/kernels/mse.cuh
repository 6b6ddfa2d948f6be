// Mean squared error (block-to-block distillation, SPD): the forward is a
// deterministic sum (reduce.cuh) read back to the host. Kernel on top,
// launchers below.
#pragma once

#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/reduce.cuh"
#include "backends/cuda/kernels/stage.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// da += k (a - b), db -= k (a - b) with k = dloss * 2 / n.
template <typename T>
STRATA_GLOBAL void k_mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, T k) {
  STRATA_GRID_LOOP(i, n) {
    const T g = k * (a[i] - b[i]);
    if (da) da[i] += g;
    if (db) db[i] -= g;
  }
}

// ------------------------------------------------------------------ launchers

// bf16 activations are staged (stage.cuh).
template <typename T>
double mse_forward(KernelContext<T>& k, ops::ActIn<T> a_, ops::ActIn<T> b_, int64_t n) {
  if (n == 0) return 0.0;
  const DeviceStagedIn<T> a(k, kStage0, a_, n), b(k, kStage1, b_, n);
  return device_sum(k, a.get(), b.get(), n, 1) / double(n);
}

template <typename T>
void mse_backward(KernelContext<T>& k, ops::Act<T> da_, ops::Act<T> db_, ops::ActIn<T> a_,
                  ops::ActIn<T> b_, int64_t n, double dloss) {
  if (n == 0 || (!da_ && !db_)) return;
  const DeviceStagedIn<T> a(k, kStage0, a_, n), b(k, kStage1, b_, n);
  const DeviceStaged<T> da(k, kStage2, da_, n), db(k, kStage3, db_, n);
  STRATA_LAUNCH(k_mse_backward<T>, blocks_for(n, 256), 256, 0, k.stream(), da.get(), db.get(),
                a.get(), b.get(), n, T(2.0 * dloss / double(n)));
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
