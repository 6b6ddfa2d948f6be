// A small register-blocked GEMM for the tiles inside fused kernels (attention),
// where calling the GEMM library per tile costs more than it saves:
//   C[M,N] = alpha * op(A)[M,K] * B[K,N]  (+ C when accumulate)
// op(A) = A stored M x K (lda), or A^T when TransA (A stored K x M).
// B is K x N row-major (ldb). Single-threaded: callers parallelise over tiles.
#pragma once

#include <algorithm>
#include <cstdint>

namespace strata::cpu {

namespace detail {

template <typename T, bool TransA, int MR, int NR>
inline void microkernel(int K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
                        int64_t ldc, bool accumulate) {
  T acc[MR][NR] = {};
  for (int k = 0; k < K; ++k) {
    const T* b = B + k * ldb;
    for (int r = 0; r < MR; ++r) {
      const T a = TransA ? A[int64_t(k) * lda + r] : A[r * lda + k];
#pragma omp simd
      for (int v = 0; v < NR; ++v) acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < MR; ++r) {
    T* c = C + r * ldc;
    if (accumulate) {
#pragma omp simd
      for (int v = 0; v < NR; ++v) c[v] += alpha * acc[r][v];
    } else {
#pragma omp simd
      for (int v = 0; v < NR; ++v) c[v] = alpha * acc[r][v];
    }
  }
}

template <typename T, bool TransA>
inline void edgekernel(int mr, int nr, int K, T alpha, const T* A, int64_t lda, const T* B,
                       int64_t ldb, T* C, int64_t ldc, bool accumulate) {
  for (int r = 0; r < mr; ++r) {
    T* c = C + r * ldc;
    if (!accumulate)
      for (int v = 0; v < nr; ++v) c[v] = T(0);
    for (int k = 0; k < K; ++k) {
      const T a = alpha * (TransA ? A[int64_t(k) * lda + r] : A[r * lda + k]);
      const T* b = B + k * ldb;
      for (int v = 0; v < nr; ++v) c[v] += a * b[v];
    }
  }
}

}  // namespace detail

template <typename T, bool TransA>
void small_gemm(int M, int N, int K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                T* C, int64_t ldc, bool accumulate) {
  constexpr int kLanes = 64 / sizeof(T);  // one 512-bit vector
  constexpr int MR = 4, NR = 2 * kLanes;
  for (int j = 0; j < N; j += NR) {
    const int nr = std::min(NR, N - j);
    for (int i = 0; i < M; i += MR) {
      const int mr = std::min(MR, M - i);
      const T* a = TransA ? A + i : A + int64_t(i) * lda;
      if (mr == MR && nr == NR)
        detail::microkernel<T, TransA, MR, NR>(K, alpha, a, lda, B + j, ldb, C + i * ldc + j, ldc,
                                               accumulate);
      else if (mr == MR && nr == kLanes)
        detail::microkernel<T, TransA, MR, kLanes>(K, alpha, a, lda, B + j, ldb, C + i * ldc + j,
                                                   ldc, accumulate);
      else
        detail::edgekernel<T, TransA>(mr, nr, K, alpha, a, lda, B + j, ldb, C + i * ldc + j, ldc,
                                      accumulate);
    }
  }
}

}  // namespace strata::cpu
