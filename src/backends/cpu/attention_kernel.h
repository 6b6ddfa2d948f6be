// The attention kernels proper (attention_kernel.cpp), behind the public
// attention_forward / attention_backward (attention.cpp), which check shapes,
// own the scratch memory and pick the kernels' instruction set at run time.
//
// attention_kernel.cpp is compiled once for the build's target (AVX2 in the
// portable build) and, in the portable build, once more for AVX-512: its
// functions live in strata::cpu::avx2 or strata::cpu::avx512 (simd.h). It
// allocates nothing and throws nothing, so no library code is compiled for
// the second instruction set.
#pragma once

#include <cstdint>

#include "backends/cpu/simd.h"

namespace strata::cpu {
inline namespace STRATA_CPU_ISA_NS {

namespace attention {

constexpr int kTile = 64;  // query rows per task
// Row stride of the transposed keys and score tiles: T rounded up to 16.
inline int64_t stride(int T) { return (int64_t(T) + 15) / 16 * 16; }
// Elements of the small-GEMM panel a thread needs (microgemm.h).
inline int64_t panel_elements(int T, int D) { return 16 * (stride(T) > D ? stride(T) : D); }
// Scratch elements: keys transposed (forward, shared) and per thread.
// Keys transposed (D x stride(T)) and values packed (T x D, rows of D
// contiguous floats) per (batch, kv head), shared by the forward's tasks.
inline int64_t forward_keys(int B, int T, int Hkv, int D) {
  return int64_t(B) * Hkv * D * stride(T) + int64_t(B) * Hkv * T * D;
}
inline int64_t forward_per_thread(int T, int D) {
  return int64_t(kTile) * stride(T) + panel_elements(T, D);
}
// Per thread in backward: K and V transposed, P and dS tiles, the row sums,
// the panel, and K packed with dK and dV accumulated in T x D (contiguous
// rows, where the kernel reads them K-row by K-row).
inline int64_t backward_per_thread(int T, int D) {
  return 2 * int64_t(D) * stride(T) + 2 * int64_t(kTile) * stride(T) + kTile +
         panel_elements(T, D) + 3 * int64_t(T) * D;
}

}  // namespace attention
}  // namespace STRATA_CPU_ISA_NS

// Thread t of the parallel region uses scratch + t * per_thread.
#define STRATA_ATTENTION_KERNELS                                                                   \
  template <typename T>                                                                            \
  void attention_forward_kernel(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv,      \
                                int D, T* keys_t, T* scratch, int64_t per_thread);                 \
  template <typename T>                                                                            \
  void attention_backward_kernel(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, \
                                 int B, int T_, int Hq, int Hkv, int D, T* scratch,                \
                                 int64_t per_thread);

inline namespace STRATA_CPU_ISA_NS {
STRATA_ATTENTION_KERNELS
}
#ifdef STRATA_AVX512_VARIANT
namespace avx512 {
STRATA_ATTENTION_KERNELS
}
#endif

}  // namespace strata::cpu
