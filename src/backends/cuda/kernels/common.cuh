// Helpers shared by the CUDA kernels: math for float and double, warp and
// block reductions, launch shapes. Compiles with nvcc and with the host
// compiler (portable.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/portable.h"
#include "ops/dtype.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xFFFFFFFFu;

STRATA_DEVICE float g_exp(float x) { return expf(x); }
STRATA_DEVICE double g_exp(double x) { return exp(x); }
STRATA_DEVICE float g_exp2(float x) { return exp2f(x); }
STRATA_DEVICE float g_log(float x) { return logf(x); }
STRATA_DEVICE float g_log2(float x) { return log2f(x); }
STRATA_DEVICE double g_log(double x) { return log(x); }
STRATA_DEVICE float g_sqrt(float x) { return sqrtf(x); }
STRATA_DEVICE double g_sqrt(double x) { return sqrt(x); }
template <typename T>
STRATA_DEVICE T g_max(T a, T b) {
  return a > b ? a : b;
}
template <typename T>
STRATA_DEVICE T g_min(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
STRATA_DEVICE T g_neg_inf() {
  return -T(INFINITY);
}

// Sum / max over the 32 lanes of a warp (every lane gets the result; the
// order of the additions is the same on every lane).
template <typename T>
STRATA_DEVICE T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
template <typename T>
STRATA_DEVICE T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = g_max(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Reduction over a block whose size is a multiple of 32 (at most 1024):
// every thread gets the result, combined in a fixed order (warps by shuffles,
// then the warps' partials in warp order). Contains barriers: every thread of
// the block must call it.
struct SumOp {
  template <typename T>
  STRATA_DEVICE T warp(T v) const {
    return warp_sum(v);
  }
  template <typename T>
  STRATA_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename T>
  STRATA_DEVICE T warp(T v) const {
    return warp_max(v);
  }
  template <typename T>
  STRATA_DEVICE T operator()(T a, T b) const {
    return g_max(a, b);
  }
};
template <typename T, typename Op>
STRATA_DEVICE T block_reduce(T v, Op op) {
  __shared__ T part[32];
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int nw = int(blockDim.x) / kWarp;
  v = op.warp(v);
  __syncthreads();  // a previous call's readers are done with `part`
  if (lane == 0) part[warp] = v;
  __syncthreads();
  T t = part[0];
  for (int w = 1; w < nw; ++w) t = op(t, part[w]);
  return t;
}
template <typename T>
STRATA_DEVICE T block_sum(T v) {
  return block_reduce(v, SumOp{});
}
template <typename T>
STRATA_DEVICE T block_max(T v) {
  return block_reduce(v, MaxOp{});
}

// Round-to-nearest-even bfloat16 bits of a float (NaN stays a quiet NaN), the
// same rounding as the CPU backend's.
STRATA_DEVICE uint16_t bf16_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t rounded = uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
  return (x & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t((x >> 16) | 0x0040u) : rounded;
}

// Activation storage (ops/dtype.h): a kernel templated on its storage S
// reads an element as its compute type (act_load: float for bf16, exact) and
// writes one rounded to S (act_store<S>: bf16_bits's rounding), the same bits
// on a GPU, on the SIMT executor and on the CPU (ops::bf16).
STRATA_DEVICE float act_load(float v) { return v; }
STRATA_DEVICE double act_load(double v) { return v; }
STRATA_DEVICE float act_load(ops::bf16 v) {
  const uint32_t bits = uint32_t(v.bits) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
// The type a backend computes in for storage S: float for bf16, S otherwise
// (so a kernel takes its storage as its one template parameter).
template <typename S>
using compute_t = std::conditional_t<std::is_same_v<S, ops::bf16>, float, S>;
template <typename S, typename T>
STRATA_DEVICE S act_store(T v) {
  if constexpr (std::is_same_v<S, ops::bf16>) {
    ops::bf16 h;
    h.bits = bf16_bits(float(v));
    return h;
  } else {
    return S(v);
  }
}

// 16-byte packs of storage S (4 floats, 8 bf16, 2 doubles): the element-wise
// kernels move 16 bytes per access where all their pointers are 16-byte
// aligned (128-bit loads and stores on a GPU: 2-byte bf16 accesses would
// leave most of the memory bandwidth unused), and the tail, or an unaligned
// view, element by element. The same values either way.
template <typename S>
inline constexpr int kPack = int(16 / sizeof(S));
template <typename S>
struct alignas(16) Pack {
  S v[kPack<S>];
};
// (Host and device: the launchers choose packed kernels with it too.)
template <typename... P>
__host__ __device__ inline bool packs_aligned(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}
template <typename S>
STRATA_DEVICE Pack<S> load_pack(const S* p) {
  return *reinterpret_cast<const Pack<S>*>(p);
}
template <typename S>
STRATA_DEVICE void store_pack(S* p, const Pack<S>& v) {
  *reinterpret_cast<Pack<S>*>(p) = v;
}
// N consecutive elements of a T array (p 16-byte aligned, N a multiple of
// T's pack): the fp32 weights beside a pack of bf16 activations, 16 bytes a
// load, read as the compute type of storage T.
template <int N, typename T>
STRATA_DEVICE void load_run(compute_t<T> (&dst)[N], const T* p) {
  static_assert(N % kPack<T> == 0, "a run is whole packs");
  for (int q = 0; q < N / kPack<T>; ++q) {
    const Pack<T> x = load_pack(p + q * kPack<T>);
    for (int j = 0; j < kPack<T>; ++j) dst[q * kPack<T> + j] = act_load(x.v[j]);
  }
}
template <int N, typename T>
STRATA_DEVICE void store_run(T* p, const compute_t<T> (&src)[N]) {
  static_assert(N % kPack<T> == 0, "a run is whole packs");
  for (int q = 0; q < N / kPack<T>; ++q) {
    Pack<T> x;
    for (int j = 0; j < kPack<T>; ++j) x.v[j] = act_store<T>(src[q * kPack<T> + j]);
    store_pack(p + q * kPack<T>, x);
  }
}

// Threads for n elements in packs of S (the launchers' grid).
template <typename S>
inline int64_t pack_threads(int64_t n) {
  return (n + kPack<S> - 1) / kPack<S>;
}

// Grid-stride loop over n elements (an element-wise kernel gives the same
// result on any grid).
#define STRATA_GRID_LOOP(i, n)                                              \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// g[i] += c * dout[i] over n elements, in packs where aligned (the backward
// of residual, c = 1, exact as a plain sum, and of axpby).
template <typename S>
STRATA_DEVICE void add_scaled(S* g, const S* dout, int64_t n, compute_t<S> c) {
  constexpr int P = kPack<S>;
  const int64_t np = packs_aligned(g, dout) ? n / P : 0;
  STRATA_GRID_LOOP(i, np) {
    const Pack<S> d = load_pack(dout + i * P);
    Pack<S> x = load_pack(g + i * P);
    for (int j = 0; j < P; ++j) x.v[j] = act_store<S>(act_load(x.v[j]) + c * act_load(d.v[j]));
    store_pack(g + i * P, x);
  }
  STRATA_GRID_LOOP(t, n - np * P) {
    const int64_t i = np * P + t;
    g[i] = act_store<S>(act_load(g[i]) + c * act_load(dout[i]));
  }
}

// Grid-stride loop shapes for n elements.
inline unsigned blocks_for(int64_t n, int threads, unsigned cap = 4096) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > cap ? cap : b));
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
