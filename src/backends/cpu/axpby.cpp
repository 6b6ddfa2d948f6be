// out = a x + b y: the weighted sum of two tensors (e.g. an interpolated norm
// weight). Its backward hands each input its share of the gradient.
#include "backends/cpu/kernels.h"

namespace strata::cpu {

template <typename T>
void axpby_forward(T* out, const T* x, const T* y, int64_t n, double a, double b) {
  const T ta = T(a), tb = T(b);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = ta * x[i] + tb * y[i];
}

template <typename T>
void axpby_backward(T* dx, T* dy, const T* dout, int64_t n, double a, double b) {
  const T ta = T(a), tb = T(b);
  if (dx) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] += ta * dout[i];
  }
  if (dy) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dy[i] += tb * dout[i];
  }
}

template void axpby_forward<float>(float*, const float*, const float*, int64_t, double, double);
template void axpby_forward<double>(double*, const double*, const double*, int64_t, double, double);
template void axpby_backward<float>(float*, float*, const float*, int64_t, double, double);
template void axpby_backward<double>(double*, double*, const double*, int64_t, double, double);

}  // namespace strata::cpu
