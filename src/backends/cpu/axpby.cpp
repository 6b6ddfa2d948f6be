// out = a x + b y: the weighted sum of two tensors (e.g. an interpolated norm
// weight). Its backward hands each input its share of the gradient.
#include "backends/cpu/kernels.h"

namespace strata::cpu {
namespace {

// out = a x + b y, or out += a x (y null).
template <typename T, typename S>
void combine(S* out, const S* x, const S* y, int64_t n, T a, T b) {
  if (y) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = S(a * T(x[i]) + b * T(y[i]));
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = S(T(out[i]) + a * T(x[i]));
  }
}

}  // namespace

template <typename T>
void axpby_forward(Act<T> out, ActIn<T> x, ActIn<T> y, int64_t n, double a, double b) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        combine<T>(out.template as<S>(), x.template as<const S>(), y.template as<const S>(), n,
                   T(a), T(b));
      },
      out, x, y);
}

template <typename T>
void axpby_backward(Act<T> dx, Act<T> dy, ActIn<T> dout, int64_t n, double a, double b) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const S* d = dout.template as<const S>();
        if (dx) combine<T>(dx.template as<S>(), d, static_cast<const S*>(nullptr), n, T(a), T(0));
        if (dy) combine<T>(dy.template as<S>(), d, static_cast<const S*>(nullptr), n, T(b), T(0));
      },
      dx, dy, dout);
}

STRATA_CPU_INSTANTIATE(axpby_forward)
STRATA_CPU_INSTANTIATE(axpby_backward)

}  // namespace strata::cpu
