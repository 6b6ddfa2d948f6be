// Explicit SIMD for the CPU kernels: GCC/Clang vector extensions at the widest
// width the translation unit is compiled for (64 bytes with AVX-512, 32 with
// AVX2, 16 with SSE). Kernels written with these types vectorise the same way whatever the
// compiler's cost model thinks of a loop, and their vector selects (`c ? a :
// b` on vectors) never turn into branches.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/dtype.h"

// Everything compiled against these headers sits in a namespace named after
// the target (strata::cpu::avx2 or strata::cpu::avx512, inline), so the same
// inline function compiled for two instruction sets in one program (the
// portable build compiles the attention kernels for both and picks one at run
// time) is two functions, never merged by the linker into the wrong one.
#ifdef __AVX512F__
#define STRATA_CPU_ISA_NS avx512
#else
#define STRATA_CPU_ISA_NS avx2
#endif

namespace strata::cpu {
inline namespace STRATA_CPU_ISA_NS {
namespace simd {

#if defined(__AVX512F__)
constexpr int kBytes = 64;
#elif defined(__AVX__)
constexpr int kBytes = 32;
#else
constexpr int kBytes = 16;  // SSE (a -march older than x86-64-v3)
#endif

// (The attribute must sit on a non-dependent typedef: GCC ignores it on a
// template alias.)
typedef float VecF __attribute__((vector_size(kBytes)));
typedef double VecD __attribute__((vector_size(kBytes)));
typedef int32_t VecI __attribute__((vector_size(kBytes)));

constexpr int kFloats = kBytes / int(sizeof(float));

template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  using type = VecF;
};
template <>
struct VecOf<double> {
  using type = VecD;
};
template <typename T>
using Vec = typename VecOf<T>::type;

// load_as<V>(p): a V (a vector, or a scalar for loop tails) from p.
template <typename V, typename T>
inline V load_as(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T, typename V>
inline void store(T* p, V v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
inline Vec<T> load(const T* p) {
  return load_as<Vec<T>>(p);
}
inline VecF splat(float x) { return VecF{} + x; }

// bf16 storage (ops/dtype.h): a vector of floats (or a float, for loop tails)
// from as many bf16 values, exactly; stores round to nearest even, as
// ops::bf16 does (a NaN stays a quiet NaN).
typedef uint16_t VecH __attribute__((vector_size(kBytes / 2)));
typedef uint32_t VecU __attribute__((vector_size(kBytes)));
template <typename V>
inline V load_as(const ops::bf16* p) {
  if constexpr (std::is_same_v<V, VecF>) {
    VecH h;
    std::memcpy(&h, p, sizeof h);
    return std::bit_cast<VecF>(__builtin_convertvector(h, VecU) << 16);
  } else {
    return V(float(*p));
  }
}
template <typename V>
inline void store(ops::bf16* p, V v) {
  if constexpr (std::is_same_v<V, VecF>) {
    const VecU x = std::bit_cast<VecU>(v);
    const VecU rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    const VecU r = (x & 0x7FFFFFFFu) > 0x7F800000u ? ((x >> 16) | 0x40u) : rounded;
    const VecH h = __builtin_convertvector(r, VecH);
    std::memcpy(static_cast<void*>(p), &h, sizeof h);
  } else {
    *p = ops::bf16(float(v));
  }
}

}  // namespace simd
}  // namespace STRATA_CPU_ISA_NS
}  // namespace strata::cpu
