// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/workspace.h"

namespace strata::cpu {

namespace {

template <typename T, typename S>
void forward(S* out, T* rstd, const S* x, const T* w, int64_t N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const S* xr = x + n * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += T(xr[c]) * T(xr[c]);
    const T r = T(1) / std::sqrt(ss / T(C) + T(eps));
    rstd[n] = r;
    S* o = out + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = S(T(xr[c]) * r * w[c]);
  }
}

// With g = dout * w:  dx = rstd * (g - x * rstd^2 * mean(g * x)).
template <typename T, typename S>
void backward(S* dx, T* dw, const S* dout, const S* x, const T* w, const T* rstd, int64_t N,
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
      const S* xr = x + n * C;
      const S* g = dout + n * C;
      const T r = rstd[n];
      if (dx) {
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; ++c) dot += T(g[c]) * w[c] * T(xr[c]);
        const T k = r * r * r * dot / T(C);
        S* d = dx + n * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) d[c] = S(T(d[c]) + (r * T(g[c]) * w[c] - k * T(xr[c])));
      }
      if (dwp) {
#pragma omp simd
        for (int c = 0; c < C; ++c) dwp[c] += T(g[c]) * T(xr[c]) * r;
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

}  // namespace

template <typename T>
void rmsnorm_forward(Act<T> out, T* rstd, ActIn<T> x, const T* w, int64_t N, int C, double eps) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        forward(out.template as<S>(), rstd, x.template as<const S>(), w, N, C, eps);
      },
      out, x);
}

template <typename T>
void rmsnorm_backward(Act<T> dx, T* dw, ActIn<T> dout, ActIn<T> x, const T* w, const T* rstd,
                      int64_t N, int C) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        backward(dx.template as<S>(), dw, dout.template as<const S>(), x.template as<const S>(), w,
                 rstd, N, C);
      },
      dx, dout, x);
}

STRATA_CPU_INSTANTIATE(rmsnorm_forward)
STRATA_CPU_INSTANTIATE(rmsnorm_backward)

}  // namespace strata::cpu
