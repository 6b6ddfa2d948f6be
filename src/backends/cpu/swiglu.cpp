// SwiGLU activation of the Llama MLP: h = silu(gate) * up.
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"

namespace strata::cpu {
namespace {

template <typename T, typename S>
void forward(S* h, const S* gateup, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const S* g = gateup + n * 2 * F;
    const S* u = g + F;
    S* o = h + n * F;
    for_lanes<T>(F, [&](int j, auto lanes) {
      using V = decltype(lanes);
      const V gj = simd::load_as<V>(g + j);
      simd::store(o + j, gj * sigmoid(gj) * simd::load_as<V>(u + j));
    });
  }
}

// d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g).
template <typename T, typename S>
void backward(S* dgateup, const S* dh, const S* gateup, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const S* g = gateup + n * 2 * F;
    const S* u = g + F;
    const S* d = dh + n * F;
    S* dg = dgateup + n * 2 * F;
    S* du = dg + F;
    for_lanes<T>(F, [&](int j, auto lanes) {
      using V = decltype(lanes);
      const V gj = simd::load_as<V>(g + j), uj = simd::load_as<V>(u + j);
      const V dj = simd::load_as<V>(d + j), s = sigmoid(gj);
      simd::store(du + j, dj * gj * s);
      simd::store(dg + j, dj * uj * s * (T(1) + gj * (T(1) - s)));
    });
  }
}

}  // namespace

template <typename T>
void swiglu_forward(Act<T> h, ActIn<T> gateup, int64_t N, int F) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        forward<T>(h.template as<S>(), gateup.template as<const S>(), N, F);
      },
      h, gateup);
}

template <typename T>
void swiglu_backward(Act<T> dgateup, ActIn<T> dh, ActIn<T> gateup, int64_t N, int F) {
  with_storage<T>(
      [&](auto s) {
        using S = decltype(s);
        backward<T>(dgateup.template as<S>(), dh.template as<const S>(),
                    gateup.template as<const S>(), N, F);
      },
      dgateup, dh, gateup);
}

STRATA_CPU_INSTANTIATE(swiglu_forward)
STRATA_CPU_INSTANTIATE(swiglu_backward)

}  // namespace strata::cpu
