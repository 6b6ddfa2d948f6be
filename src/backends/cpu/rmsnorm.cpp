// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/workspace.h"

namespace strata::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const T r = T(1) / std::sqrt(ss / T(C) + T(eps));
    rstd[n] = r;
    T* o = out + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = xr[c] * r * w[c];
  }
}

// With g = dout * w:  dx = rstd * (g - x * rstd^2 * mean(g * x)).
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int64_t N,
                      int C) {
  struct Tag {};
  const int nt = omp_get_max_threads();
  T* partial = dw ? workspace<T, 0, Tag>(size_t(nt) * C) : nullptr;
  if (partial) std::memset(partial, 0, sizeof(T) * size_t(nt) * C);
#pragma omp parallel
  {
    T* dwp = partial ? partial + size_t(omp_get_thread_num()) * C : nullptr;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      const T* g = dout + n * C;
      const T r = rstd[n];
      if (dx) {
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; ++c) dot += g[c] * w[c] * xr[c];
        const T k = r * r * r * dot / T(C);
        T* d = dx + n * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) d[c] += r * g[c] * w[c] - k * xr[c];
      }
      if (dwp) {
#pragma omp simd
        for (int c = 0; c < C; ++c) dwp[c] += g[c] * xr[c] * r;
      }
    }
  }
  if (dw)
    for (int t = 0; t < nt; ++t) {
      const T* p = partial + size_t(t) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) dw[c] += p[c];
    }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int,
                                     double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int,
                                      double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int);

}  // namespace strata::cpu
