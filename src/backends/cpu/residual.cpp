// Residual connection: out = a + b. Its backward passes dout to both inputs.
#include "backends/cpu/kernels.h"

namespace strata::cpu {
namespace {

template <typename T, typename S>
void add(S* out, const S* a, const S* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = S(T(a[i]) + T(b[i]));
}

}  // namespace

template <typename T>
void residual_forward(Act<T> out, ActIn<T> a, ActIn<T> b, int64_t n) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        add<T>(out.template as<S>(), a.template as<const S>(), b.template as<const S>(), n);
      },
      out, a, b);
}

template <typename T>
void residual_backward(Act<T> da, Act<T> db, ActIn<T> dout, int64_t n) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const S* d = dout.template as<const S>();
        for (S* g : {da.template as<S>(), db.template as<S>()})
          if (g) add<T>(g, g, d, n);
      },
      da, db, dout);
}

STRATA_CPU_INSTANTIATE(residual_forward)
STRATA_CPU_INSTANTIATE(residual_backward)

}  // namespace strata::cpu
