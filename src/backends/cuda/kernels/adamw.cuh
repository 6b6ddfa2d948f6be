// AdamW with decoupled weight decay and bias correction (torch.optim.AdamW),
// reading the gradient times its clipping factor: given by the host, or
// computed here from the sums of squares on the device, so no host read sits
// between the gradient norm and the update (ops::AdamWStep). 16-byte packs
// where the four arrays allow (common.cuh). Kernel on top, launcher below.
#pragma once

#include <cmath>

#include "backends/cuda/kernels/context.cuh"
#include "ops/types.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// c1, c2 = 1 / bias corrections, decay = 1 - lr * wd.
template <typename T>
struct AdamWArgs {
  T lr, b1, b2, eps, decay, c1, c2;
  const double* squares;  // null: `clip` is the factor
  double clip, max_norm;
};

// The factor, as ops::adamw_clip_factor computes it on the host (IEEE double
// sqrt and division on both: the same bits); false for a non-finite norm.
STRATA_DEVICE bool adamw_factor(const double* squares, double clip, double max_norm, double* k) {
  if (!squares) {
    *k = clip;
    return true;
  }
  const double norm = g_sqrt(squares[0] + squares[1]);
  if (!(norm <= 1.7976931348623157e308)) return false;  // NaN or inf: update nothing
  *k = max_norm <= 0 ? 1.0 : g_min(1.0, max_norm / (norm + 1e-6));
  return true;
}

template <typename T>
STRATA_DEVICE void adamw_one(T& p, T g, T& m, T& v, const AdamWArgs<T>& a) {
  const T mi = a.b1 * m + (T(1) - a.b1) * g;
  const T vi = a.b2 * v + (T(1) - a.b2) * g * g;
  m = mi;
  v = vi;
  p = p * a.decay - a.lr * (mi * a.c1) / (g_sqrt(vi * a.c2) + a.eps);
}

template <typename T>
STRATA_GLOBAL void k_adamw(T* p, const T* g, T* m, T* v, int64_t n, AdamWArgs<T> a) {
  double kd;
  if (!adamw_factor(a.squares, a.clip, a.max_norm, &kd)) return;
  const T k = T(kd);
  constexpr int P = kPack<T>;
  const int64_t np = packs_aligned(p, g, m, v) ? n / P : 0;
  STRATA_GRID_LOOP(i, np) {
    Pack<T> pp = load_pack(p + i * P), mm = load_pack(m + i * P), vv = load_pack(v + i * P);
    const Pack<T> gg = load_pack(g + i * P);
    for (int j = 0; j < P; ++j) adamw_one(pp.v[j], gg.v[j] * k, mm.v[j], vv.v[j], a);
    store_pack(p + i * P, pp);
    store_pack(m + i * P, mm);
    store_pack(v + i * P, vv);
  }
  STRATA_GRID_LOOP(t, n - np * P) {
    const int64_t i = np * P + t;
    adamw_one(p[i], g[i] * k, m[i], v[i], a);
  }
}

// ------------------------------------------------------------------ launchers

template <typename T>
void adamw_update(KernelContext<T>& k, T* p, const T* g, T* m, T* v, int64_t n,
                  const ops::AdamWStep& s) {
  if (n == 0) return;
  AdamWArgs<T> a;
  a.lr = T(s.lr);
  a.b1 = T(s.beta1);
  a.b2 = T(s.beta2);
  a.eps = T(s.eps);
  a.decay = T(1.0 - s.lr * s.weight_decay);
  a.c1 = T(1.0 / (1.0 - std::pow(s.beta1, double(s.step))));
  a.c2 = T(1.0 / (1.0 - std::pow(s.beta2, double(s.step))));
  a.squares = s.squares;
  a.clip = s.clip;
  a.max_norm = s.max_norm;
  STRATA_LAUNCH(k_adamw<T>, blocks_for(pack_threads<T>(n), 256), 256, 0, k.stream(), p, g, m, v, n,
                a);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
