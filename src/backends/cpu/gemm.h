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

}  // namespace strata::cpu
