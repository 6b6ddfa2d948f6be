// Exp-based math of the kernels (softmax, cross-entropy, SwiGLU), vectorised
// by hand (simd.h) rather than left to the auto-vectoriser: with AVX2 targets
// GCC turns the clamps of exp into branches and either leaves the loop scalar
// or, without trapping math, computes the clamped path for every lane, whose
// denormal results cost a microcode assist each (5x slower SwiGLU).
//
// float uses a Cephes-style exp (about 1 ulp); double uses std::exp so the
// gradient checks run at full double precision. Row sums accumulate 16
// partial sums (lane j % 16) combined in a fixed order, so they are the same
// whether the vectors hold 8 floats (AVX2) or 16 (AVX-512).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/simd.h"

namespace strata::cpu {
inline namespace STRATA_CPU_ISA_NS {

namespace detail {
inline int32_t to_int(float x) { return static_cast<int32_t>(x); }
inline simd::VecI to_int(simd::VecF x) { return __builtin_convertvector(x, simd::VecI); }
inline float from_bits(int32_t b) { return std::bit_cast<float>(b); }
inline simd::VecF from_bits(simd::VecI b) { return std::bit_cast<simd::VecF>(b); }
}  // namespace detail

// exp(x) for a float or a vector of floats (V = float or simd::VecF), the same
// operations in the same order for both.
template <typename V>
inline V exp_approx(V x) {
  const V lo = V{} - 87.0f, hi = V{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // n = round(x / ln2) by the 1.5*2^23 trick (exact for |x / ln2| < 2^22).
  const float shifter = 12582912.0f;
  const V n = (x * 1.44269504088896341f + shifter) - shifter;
  const V r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * detail::from_bits((detail::to_int(n) + 127) << 23);
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

// sigmoid for float, double or simd::VecF.
template <typename V>
inline V sigmoid(V x) {
  if constexpr (std::is_same_v<V, double>)
    return 1.0 / (1.0 + std::exp(-x));
  else
    return 1.0f / (1.0f + exp_approx(-x));
}

// ---------------------------------------------------------------- row kernels
// Each works on one contiguous row of n values, single-threaded (callers
// parallelise over rows). y may alias x.

// max_j x[j] (n >= 1).
template <typename T>
inline T row_max(const T* x, int n) {
  T m = x[0];
  for (int j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}
template <>
inline float row_max<float>(const float* x, int n) {
  constexpr int L = simd::kFloats;
  float m = x[0];
  int j = 0;
  if (n >= L) {
    simd::VecF v = simd::load<float>(x);
    for (j = L; j + L <= n; j += L) {
      const simd::VecF a = simd::load<float>(x + j);
      v = a > v ? a : v;
    }
    for (int l = 0; l < L; ++l) m = v[l] > m ? v[l] : m;
  }
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Applies f (V -> V, V = float or simd::VecF) to every x[j] - shift; writes the
// results to y unless y is null; returns their sum (16 fixed partial sums).
template <typename F>
inline float map_sum_16(float* y, const float* x, int n, float shift, F&& f) {
  constexpr int L = simd::kFloats, A = 16 / L;
  simd::VecF acc[A] = {};
  const simd::VecF s = simd::splat(shift);
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int a = 0; a < A; ++a) {
      const simd::VecF e = f(simd::load<float>(x + j + a * L) - s);
      if (y) simd::store(y + j + a * L, e);
      acc[a] += e;
    }
  float part[16];
  std::memcpy(part, acc, sizeof part);
  for (; j < n; ++j) {
    const float e = f(x[j] - shift);
    if (y) y[j] = e;
    part[j % 16] += e;
  }
  float sum = 0;
  for (float p : part) sum += p;
  return sum;
}

// y[j] = exp(x[j] - shift) (y null: not stored); returns sum_j exp(x[j] - shift).
template <typename T>
inline T exp_shift_sum(T* y, const T* x, int n, T shift) {
  T sum = 0;
  for (int j = 0; j < n; ++j) {
    const T e = vexp<T>(x[j] - shift);
    if (y) y[j] = e;
    sum += e;
  }
  return sum;
}
template <>
inline float exp_shift_sum<float>(float* y, const float* x, int n, float shift) {
  return map_sum_16(y, x, n, shift, [](auto v) { return exp_approx(v); });
}

// y[j] = k * exp(x[j] - shift).
template <typename T>
inline void scaled_exp_shift(T* y, const T* x, int n, T shift, T k) {
  for (int j = 0; j < n; ++j) y[j] = k * vexp<T>(x[j] - shift);
}
template <>
inline void scaled_exp_shift<float>(float* y, const float* x, int n, float shift, float k) {
  constexpr int L = simd::kFloats;
  const simd::VecF s = simd::splat(shift), kv = simd::splat(k);
  int j = 0;
  for (; j + L <= n; j += L) simd::store(y + j, kv * exp_approx(simd::load<float>(x + j) - s));
  for (; j < n; ++j) y[j] = k * exp_approx(x[j] - shift);
}

// Calls f(j, v) with v a simd::VecF at j = 0, L, 2L, ... and then with v a
// float for the tail; T = double runs the scalar form only.
template <typename T, typename F>
inline void for_lanes(int n, F&& f) {
  int j = 0;
  if constexpr (std::is_same_v<T, float>)
    for (; j + simd::kFloats <= n; j += simd::kFloats) f(j, simd::VecF{});
  for (; j < n; ++j) f(j, T{});
}

}  // namespace STRATA_CPU_ISA_NS
}  // namespace strata::cpu
