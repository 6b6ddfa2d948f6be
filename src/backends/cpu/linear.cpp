// Linear layer y = x W^T (+ b) with W stored [out, in] as in Hugging Face.
#include <omp.h>

#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/workspace.h"

namespace strata::cpu {

template <typename T>
void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC, int OC) {
  gemm<T>(false, true, N, OC, IC, T(1), x, IC, w, IC, T(0), out, OC);
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      T* o = out + n * OC;
#pragma omp simd
      for (int j = 0; j < OC; ++j) o[j] += bias[j];
    }
  }
}

template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N,
                     int IC, int OC, bool accumulate_dx) {
  if (dx)
    gemm<T>(false, false, N, IC, OC, T(1), dout, OC, w, IC, accumulate_dx ? T(1) : T(0), dx, IC);
  if (dw) gemm<T>(true, false, OC, IC, N, T(1), dout, OC, x, IC, T(1), dw, IC);
  if (dbias) {
    struct Tag {};
    const int nt = omp_get_max_threads();
    T* partial = workspace<T, 0, Tag>(size_t(nt) * OC);
    std::memset(partial, 0, sizeof(T) * size_t(nt) * OC);
#pragma omp parallel
    {
      T* p = partial + size_t(omp_get_thread_num()) * OC;
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dout + n * OC;
#pragma omp simd
        for (int j = 0; j < OC; ++j) p[j] += g[j];
      }
    }
    for (int t = 0; t < nt; ++t)
      for (int j = 0; j < OC; ++j) dbias[j] += partial[size_t(t) * OC + j];
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int,
                                    int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int, int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int, int, bool);
template void linear_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int, int, bool);

}  // namespace strata::cpu
