// Mean squared error, used by block-to-block distillation (SPD).
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"

namespace strata::cpu {

template <typename T>
double mse_forward(const T* a, const T* b, int64_t n) {
  const double sum = parallel_sum(n, [&](int64_t i) {
    const double d = double(a[i]) - double(b[i]);
    return d * d;
  });
  return n ? sum / double(n) : 0.0;
}

template <typename T>
void mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, double dloss) {
  const T k = T(2.0 * dloss / double(n));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T g = k * (a[i] - b[i]);
    if (da) da[i] += g;
    if (db) db[i] -= g;
  }
}

template double mse_forward<float>(const float*, const float*, int64_t);
template double mse_forward<double>(const double*, const double*, int64_t);
template void mse_backward<float>(float*, float*, const float*, const float*, int64_t, double);
template void mse_backward<double>(double*, double*, const double*, const double*, int64_t, double);

}  // namespace strata::cpu
