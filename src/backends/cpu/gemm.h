// CPU GEMM binding. Row-major throughout:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// op(A) = A stored M x K (lda) or, when trans_a, A stored K x M (lda); same for B.
//
// float runs on oneDNN's dnnl_sgemm (chosen by measurement, see README and
// bench/gemm_libraries.cpp): its JIT kernels detect the CPU (AVX-512, AMX)
// without environment variables, and it threads on the same OpenMP pool as
// strata's kernels. double (used by gradient checks) runs on a plain loop.
#pragma once

#include <cstdint>

namespace strata::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// Precision of float GEMMs (double GEMMs are always exact), like PyTorch's
// autocast for matmuls: FP32, or BF16, where A and B are rounded to bfloat16
// (round to nearest even) and multiplied with fp32 accumulation and an fp32
// result, through oneDNN's matmul primitive (created once per shape, cached).
// Everything that is not a GEMM stays fp32.
enum class MatmulPrecision { FP32, BF16 };
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();

// Round-to-nearest-even conversion of n floats to bfloat16 bit patterns
// (parallel; float_to_bf16_serial is the single-threaded loop).
void float_to_bf16(uint16_t* dst, const float* src, int64_t n);
inline void float_to_bf16_serial(uint16_t* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x;
    __builtin_memcpy(&x, src + i, 4);
    const uint16_t rounded = uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
    // NaN stays NaN (quiet), instead of carrying into infinity or -0.
    dst[i] = (x & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t((x >> 16) | 0x0040u) : rounded;
  }
}
float bf16_to_float(uint16_t x);

}  // namespace strata::cpu
