// Mean squared error, used by block-to-block distillation (SPD).
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"

namespace strata::cpu {

template <typename T>
double mse_forward(ActIn<T> a, ActIn<T> b, int64_t n) {
  return with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const S *pa = a.template as<const S>(), *pb = b.template as<const S>();
        const double sum = parallel_sum(n, [&](int64_t i) {
          const double d = double(T(pa[i])) - double(T(pb[i]));
          return d * d;
        });
        return n ? sum / double(n) : 0.0;
      },
      a, b);
}

template <typename T>
void mse_backward(Act<T> da, Act<T> db, ActIn<T> a, ActIn<T> b, int64_t n, double dloss) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const S *pa = a.template as<const S>(), *pb = b.template as<const S>();
        S *ga = da.template as<S>(), *gb = db.template as<S>();
        const T k = T(2.0 * dloss / double(n));
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) {
          const T g = k * (T(pa[i]) - T(pb[i]));
          if (ga) ga[i] = S(T(ga[i]) + g);
          if (gb) gb[i] = S(T(gb[i]) - g);
        }
      },
      da, db, a, b);
}

STRATA_CPU_INSTANTIATE(mse_forward)
STRATA_CPU_INSTANTIATE(mse_backward)

}  // namespace strata::cpu
