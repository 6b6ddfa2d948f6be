// Bias add over rows: out[n, :] += bias. Its backward sums dout over rows.
#include <omp.h>

#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/workspace.h"

namespace strata::cpu {

template <typename T>
void bias_add_forward(Act<T> out_, const T* bias, int64_t N, int OC, int64_t ld) {
  if (!ld) ld = OC;
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        S* out = out_.template as<S>();
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
          S* o = out + n * ld;
#pragma omp simd
          for (int j = 0; j < OC; ++j) o[j] = S(T(o[j]) + bias[j]);
        }
      },
      out_);
}

// Each thread sums a fixed range of rows; the partials are combined in thread
// order, so the result depends only on the thread count.
template <typename T>
void bias_add_backward(T* dbias, ActIn<T> dout_, int64_t N, int OC, int64_t ld) {
  if (!ld) ld = OC;
  struct Tag {};
  const int nt = omp_get_max_threads();
  T* partial = workspace<T, 0, Tag>(size_t(nt) * OC);
  std::memset(partial, 0, sizeof(T) * size_t(nt) * OC);
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        const S* dout = dout_.template as<const S>();
#pragma omp parallel
        {
          T* p = partial + size_t(omp_get_thread_num()) * OC;
#pragma omp for schedule(static)
          for (int64_t n = 0; n < N; ++n) {
            const S* g = dout + n * ld;
#pragma omp simd
            for (int j = 0; j < OC; ++j) p[j] += T(g[j]);
          }
        }
      },
      dout_);
  for (int t = 0; t < nt; ++t)
    for (int j = 0; j < OC; ++j) dbias[j] += partial[size_t(t) * OC + j];
}

STRATA_CPU_INSTANTIATE(bias_add_forward)
STRATA_CPU_INSTANTIATE(bias_add_backward)

}  // namespace strata::cpu
