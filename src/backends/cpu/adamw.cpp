// AdamW with decoupled weight decay and bias correction (torch.optim.AdamW),
// reading the gradient times its clipping factor (ops::AdamWStep).
#include <cmath>

#include "backends/cpu/kernels.h"

namespace strata::cpu {

template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWStep& s) {
  double factor = 1.0;
  if (!ops::adamw_clip_factor(s, &factor)) return;  // non-finite norm: nothing changes
  const T b1 = T(s.beta1), b2 = T(s.beta2);
  const T decay = T(1.0 - s.lr * s.weight_decay);
  const T c1 = T(1.0 / (1.0 - std::pow(s.beta1, double(s.step))));
  const T c2 = T(1.0 / (1.0 - std::pow(s.beta2, double(s.step))));
  const T lr = T(s.lr), eps = T(s.eps), k = T(factor);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i] * k;
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - lr * (mi * c1) / (std::sqrt(vi * c2) + eps);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWStep&);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t,
                                   const AdamWStep&);

}  // namespace strata::cpu
