// Kernels of the GEMM engines (cuda_backend.cu's cuBLASLt engine, the SIMT
// build's CPU GEMM stand-in): bf16 rounding of operands, packing a strided
// block, and C *= beta for a GEMM with K = 0. Templates, like every kernel
// here, so a header can define them in several units.
#pragma once

#include "backends/cuda/kernels/common.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// dst[i] = bfloat16 bits of src[i] (cuBLASLt's bf16 operands).
template <typename F = float>
STRATA_GLOBAL void k_to_bf16(uint16_t* dst, const F* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) dst[i] = bf16_bits(src[i]);
}

// dst[i] = src[i] rounded to bfloat16, kept as float (SIMT GEMM stand-in).
template <typename F = float>
STRATA_GLOBAL void k_round_bf16(F* dst, const F* src, int64_t n) {
  STRATA_GRID_LOOP(i, n) {
    const uint32_t bits = uint32_t(bf16_bits(src[i])) << 16;
    memcpy(dst + i, &bits, 4);
  }
}

// A rows x cols block of a matrix with leading dimension ld, copied compact.
template <typename T>
STRATA_GLOBAL void k_pack(T* dst, const T* src, int64_t rows, int64_t cols, int64_t ld) {
  STRATA_GRID_LOOP(i, rows * cols) dst[i] = src[(i / cols) * ld + i % cols];
}

// C[r, c] *= beta over an M x N block with leading dimension ld (a GEMM with
// K = 0); beta 0 writes zeros (no NaN from uninitialised memory).
template <typename T>
STRATA_GLOBAL void k_scale_matrix(T* C, int64_t M, int64_t N, int64_t ld, T beta) {
  STRATA_GRID_LOOP(i, M * N) {
    T* c = C + (i / N) * ld + i % N;
    *c = beta == T(0) ? T(0) : *c * beta;
  }
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
