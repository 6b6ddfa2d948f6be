// Few-row matmuls C = alpha A B^T + beta C (A: M x K rows, B: N x K, stored
// as fp32 or as bf16 bits): the linear layers and the LM head on the rows of
// a decode step or a self-speculative verification (gemm.cpp sends them
// here). Each element is a dot product of one row of A and one row of B in
// 16 lanes summed pairwise (fp32: lane j takes the columns k = j mod 16;
// bf16: the pairs 2j, 2j + 1 of each 32 columns), so its value depends on
// those two rows only: not on M, on the row group, on the columns a thread
// or a tensor-parallel rank takes, or on the instruction set.
//
// rows_kernel.cpp is compiled once for the build's target and, in the
// portable build, once more for AVX-512 (like attention_kernel.cpp); it
// allocates nothing and throws nothing.
#pragma once

#include <cstdint>

#include "backends/cpu/simd.h"

namespace strata::cpu {

// few_rows_gemm_nt's A when B is bf16: each row's K values (already rounded to bf16)
// zero-padded to a multiple of 32, each chunk of 32 stored as its 16 even
// columns, then its 16 odd ones. dst holds pair_layout_size(K) floats.
inline int64_t pair_layout_size(int64_t K) { return (K + 31) / 32 * 32; }
inline void bf16_pair_layout(float* dst, const float* src, int64_t K) {
  const int64_t Kp = pair_layout_size(K);
  for (int64_t c = 0; c < Kp; c += 32)
    for (int j = 0; j < 16; ++j) {
      dst[c + j] = c + 2 * j < K ? src[c + 2 * j] : 0.0f;
      dst[c + 16 + j] = c + 2 * j + 1 < K ? src[c + 2 * j + 1] : 0.0f;
    }
}

#define STRATA_ROWS_KERNELS                                                                        \
  void few_rows_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc);           \
  void few_rows_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
                        const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

inline namespace STRATA_CPU_ISA_NS {
STRATA_ROWS_KERNELS
}
#ifdef STRATA_AVX512_VARIANT
namespace avx512 {
STRATA_ROWS_KERNELS
}
#endif

}  // namespace strata::cpu
