// SwiGLU activation of the Llama MLP: h = silu(gate) * up.
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"

namespace strata::cpu {

template <typename T>
void swiglu_forward(T* h, const T* gateup, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = gateup + n * 2 * F;
    const T* u = g + F;
    T* o = h + n * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) o[j] = g[j] * sigmoid<T>(g[j]) * u[j];
  }
}

// d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g).
template <typename T>
void swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = gateup + n * 2 * F;
    const T* u = g + F;
    const T* d = dh + n * F;
    T* dg = dgateup + n * 2 * F;
    T* du = dg + F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const T s = sigmoid<T>(g[j]);
      du[j] = d[j] * g[j] * s;
      dg[j] = d[j] * u[j] * s * (T(1) + g[j] * (T(1) - s));
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int64_t, int);
template void swiglu_forward<double>(double*, const double*, int64_t, int);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int);
template void swiglu_backward<double>(double*, const double*, const double*, int64_t, int);

}  // namespace strata::cpu
