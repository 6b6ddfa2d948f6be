// The library under the CPU GEMM binding (gemm.cpp), chosen at configure time
// (STRATA_GEMM_LIBRARY, docs/performance.md "GEMM library"): oneDNN
// (gemm_onednn.cpp: Debian's 2.6 or a 3.x from STRATA_ONEDNN_ROOT), oneMKL
// (gemm_mkl.cpp) or strata's own kernels (gemm_own.cpp, also the fallback of a
// build without oneDNN). CMake compiles exactly one of them into the library;
// each depends on core/ only (error.cpp, cpu.cpp), so tests/gemm_binding_test
// can check every one the machine has in a binary of its own.
#pragma once

#include <cstdint>
#include <string>

namespace strata::cpu {

// strata's few-row kernel for this CPU (the AVX-512 copy where the portable
// build has one; gemm.cpp): C = alpha A B^T + beta C, B row-major N x K.
void few_rows_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace strata::cpu

namespace strata::cpu::library {

// Whether the leading dimensions (row-major, as sgemm's) hold op(A) M x K,
// op(B) K x N and C M x N; each binding refuses the others in its own words.
inline bool leading_dims_fit(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                             int64_t ldb, int64_t ldc) {
  return lda >= (ta ? M : K) && ldb >= (tb ? K : N) && ldc >= N;
}

// C = alpha op(A) op(B) + beta C in fp32, row-major (the layout of gemm.h).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Whether the library multiplies bf16 operands natively on this CPU (asked
// once the CPU is known to have a bf16 dot product).
bool native_bf16();

// The same product of bf16 operands (leading dimensions as sgemm's) into fp32
// C; only where native_bf16().
void bf16_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                 int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The library and its version, e.g. "oneDNN 2.6.3" (gemm.h's gemm_library()).
std::string name();

// How a GEMM runs, one line (gemm.h's matmul_path(); part of the numerics
// fingerprint of tests/fixtures/golden_values.txt, so a binding keeps its
// wording): in fp32, in bf16 on the library's native kernels, or in bf16
// emulated (operands rounded to bf16, then sgemm).
enum class Path { FP32, BF16Native, BF16Emulated };
std::string describe(Path p);

}  // namespace strata::cpu::library
