// Rotary position embedding, rotate-half layout (Hugging Face Llama): element i
// of a head pairs with element i + D/2.
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/error.h"

namespace strata::cpu {

template <typename T>
void rope_table(T* cos, T* sin, int max_pos, int D, const double* inv_freq) {
  STRATA_CHECK(D % 2 == 0, "RoPE needs an even head dimension, got ", D);
  const int half = D / 2;
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < half; ++i) {
      const double angle = double(p) * inv_freq[i];
      cos[int64_t(p) * half + i] = T(std::cos(angle));
      sin[int64_t(p) * half + i] = T(std::sin(angle));
    }
}

template <typename T>
void rope_table(T* cos, T* sin, int max_pos, int D, double theta) {
  std::vector<double> inv_freq(D / 2);
  for (int i = 0; i < D / 2; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / D);
  rope_table(cos, sin, max_pos, D, inv_freq.data());
}

namespace {
// sign = +1 rotates forward, -1 applies the transpose (backward).
template <typename T, typename S>
void rotate(S* x, const T* cos, const T* sin, int B, int T_, int H, int D, int64_t row_stride,
            int pos0, T sign) {
  const int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T_; ++t) {
      S* row = x + (int64_t(b) * T_ + t) * row_stride;
      const T* c = cos + int64_t(pos0 + t) * half;
      const T* s = sin + int64_t(pos0 + t) * half;
      for (int h = 0; h < H; ++h) {
        S* lo = row + int64_t(h) * D;
        S* hi = lo + half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const T a = T(lo[i]), bb = T(hi[i]), si = sign * s[i];
          lo[i] = S(a * c[i] - bb * si);
          hi[i] = S(bb * c[i] + a * si);
        }
      }
    }
}

template <typename T>
void rotate_act(Act<T> x, const T* cos, const T* sin, int B, int T_, int H, int D,
                int64_t row_stride, int pos0, T sign) {
  with_storage<T>(
      [&](auto s) {
        rotate<T>(x.template as<decltype(s)>(), cos, sin, B, T_, H, D, row_stride, pos0, sign);
      },
      x);
}
}  // namespace

template <typename T>
void rope_forward(Act<T> x, const T* cos, const T* sin, int B, int T_, int H, int D,
                  int64_t row_stride, int pos0) {
  rotate_act<T>(x, cos, sin, B, T_, H, D, row_stride, pos0, T(1));
}

template <typename T>
void rope_backward(Act<T> dx, const T* cos, const T* sin, int B, int T_, int H, int D,
                   int64_t row_stride, int pos0) {
  rotate_act<T>(dx, cos, sin, B, T_, H, D, row_stride, pos0, T(-1));
}

template void rope_table<float>(float*, float*, int, int, double);
template void rope_table<double>(double*, double*, int, int, double);
template void rope_table<float>(float*, float*, int, int, const double*);
template void rope_table<double>(double*, double*, int, int, const double*);
STRATA_CPU_INSTANTIATE(rope_forward)
STRATA_CPU_INSTANTIATE(rope_backward)

}  // namespace strata::cpu
