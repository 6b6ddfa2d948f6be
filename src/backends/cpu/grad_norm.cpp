// Global-norm gradient clipping helpers.
#include <algorithm>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"

namespace strata::cpu {

template <typename T>
double sum_squares(const T* x, int64_t n) {
  return parallel_sum(n, [&](int64_t i) { return double(x[i]) * double(x[i]); });
}

template <typename T>
void scale_inplace(T* x, int64_t n, double s) {
  const T k = T(s);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= k;
}

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);
template void scale_inplace<float>(float*, int64_t, double);
template void scale_inplace<double>(double*, int64_t, double);

}  // namespace strata::cpu
