// The library under the CPU GEMM binding (gemm.cpp): oneDNN (gemm_onednn.cpp)
// or, in a build without oneDNN, strata's own kernels (gemm_own.cpp). CMake
// compiles exactly one of the two; each also defines gemm_library() and
// matmul_path() of gemm.h, which describe it.
#pragma once

#include <cstdint>

namespace strata::cpu {

// strata's few-row kernel for this CPU (the AVX-512 copy where the portable
// build has one; gemm.cpp): C = alpha A B^T + beta C, B row-major N x K.
void few_rows_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace strata::cpu

namespace strata::cpu::library {

// C = alpha op(A) op(B) + beta C in fp32, row-major (the layout of gemm.h).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Whether the library multiplies bf16 operands natively on this CPU (asked
// once the CPU is known to have a bf16 dot product).
bool native_bf16();

// The same product of compact (ld = row length) bf16 operands into fp32 C;
// only where native_bf16().
void bf16_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                 const uint16_t* B, float beta, float* C, int64_t ldc);

}  // namespace strata::cpu::library
