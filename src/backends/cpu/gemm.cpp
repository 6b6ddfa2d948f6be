#include "backends/cpu/gemm.h"

#include <dnnl.hpp>

#include "core/error.h"

namespace strata::cpu {
template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                      ldb, beta, C, ldc);
  STRATA_CHECK(st == dnnl_success, "oneDNN sgemm failed (status ", int(st), ") for M=", M,
               " N=", N, " K=", K);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                  double* C, int64_t ldc) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    double* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      const double a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
      if (tb) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      } else {
        const double* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}

}  // namespace strata::cpu
