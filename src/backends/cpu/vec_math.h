// Branch-free math that the compiler vectorises (no -ffast-math needed).
// float uses a Cephes-style exp (about 1 ulp); double uses std::exp so the
// gradient checks run at full double precision.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace strata::cpu {

inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln2) by the 1.5*2^23 trick (exact for |x / ln2| < 2^22).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

template <typename T>
inline T vexp(T x);
template <>
inline float vexp<float>(float x) {
  return exp_approx(x);
}
template <>
inline double vexp<double>(double x) {
  return std::exp(x);
}

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + vexp<T>(-x));
}

}  // namespace strata::cpu
