// AdamW with decoupled weight decay and bias correction (torch.optim.AdamW).
// Kernel on top, launcher below.
#pragma once

#include <cmath>

#include "backends/cuda/kernels/context.cuh"
#include "ops/types.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// c1, c2 = 1 / bias corrections, decay = 1 - lr * wd.
template <typename T>
STRATA_GLOBAL void k_adamw(T* p, const T* g, T* m, T* v, int64_t n, T lr, T b1, T b2, T eps,
                           T decay, T c1, T c2) {
  STRATA_GRID_LOOP(i, n) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - lr * (mi * c1) / (g_sqrt(vi * c2) + eps);
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void adamw_update(KernelContext<T>& k, T* p, const T* g, T* m, T* v, int64_t n,
                  const ops::AdamWStep& s) {
  if (n == 0) return;
  const T c1 = T(1.0 / (1.0 - std::pow(s.beta1, double(s.step))));
  const T c2 = T(1.0 / (1.0 - std::pow(s.beta2, double(s.step))));
  STRATA_LAUNCH(k_adamw<T>, blocks_for(n, 256), 256, 0, k.stream(), p, g, m, v, n, T(s.lr),
                T(s.beta1), T(s.beta2), T(s.eps), T(1.0 - s.lr * s.weight_decay), c1, c2);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
