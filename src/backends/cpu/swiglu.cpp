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
    for_lanes<T>(F, [&](int j, auto lanes) {
      using V = decltype(lanes);
      const V gj = simd::load_as<V>(g + j);
      simd::store(o + j, gj * sigmoid(gj) * simd::load_as<V>(u + j));
    });
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
    for_lanes<T>(F, [&](int j, auto lanes) {
      using V = decltype(lanes);
      const V gj = simd::load_as<V>(g + j), uj = simd::load_as<V>(u + j);
      const V dj = simd::load_as<V>(d + j), s = sigmoid(gj);
      simd::store(du + j, dj * gj * s);
      simd::store(dg + j, dj * uj * s * (T(1) + gj * (T(1) - s)));
    });
  }
}

template void swiglu_forward<float>(float*, const float*, int64_t, int);
template void swiglu_forward<double>(double*, const double*, int64_t, int);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int);
template void swiglu_backward<double>(double*, const double*, const double*, int64_t, int);

}  // namespace strata::cpu
