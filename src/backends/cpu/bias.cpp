// Bias add over rows: out[n, :] += bias. Its backward sums dout over rows.
#include <omp.h>

#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/workspace.h"

namespace strata::cpu {

template <typename T>
void bias_add_forward(T* out, const T* bias, int64_t N, int OC, int64_t ld) {
  if (!ld) ld = OC;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    T* o = out + n * ld;
#pragma omp simd
    for (int j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

// Each thread sums a fixed range of rows; the partials are combined in thread
// order, so the result depends only on the thread count.
template <typename T>
void bias_add_backward(T* dbias, const T* dout, int64_t N, int OC, int64_t ld) {
  if (!ld) ld = OC;
  struct Tag {};
  const int nt = omp_get_max_threads();
  T* partial = workspace<T, 0, Tag>(size_t(nt) * OC);
  std::memset(partial, 0, sizeof(T) * size_t(nt) * OC);
#pragma omp parallel
  {
    T* p = partial + size_t(omp_get_thread_num()) * OC;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* g = dout + n * ld;
#pragma omp simd
      for (int j = 0; j < OC; ++j) p[j] += g[j];
    }
  }
  for (int t = 0; t < nt; ++t)
    for (int j = 0; j < OC; ++j) dbias[j] += partial[size_t(t) * OC + j];
}

template void bias_add_forward<float>(float*, const float*, int64_t, int, int64_t);
template void bias_add_forward<double>(double*, const double*, int64_t, int, int64_t);
template void bias_add_backward<float>(float*, const float*, int64_t, int, int64_t);
template void bias_add_backward<double>(double*, const double*, int64_t, int, int64_t);

}  // namespace strata::cpu
