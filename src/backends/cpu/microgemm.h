// A small register-blocked GEMM for the tiles inside fused kernels (attention),
// where calling the GEMM library per tile costs more than it saves:
//   C[M,N] = alpha * op(A)[M,K] * B[K,N]  (+ C when accumulate)
// op(A) = A stored M x K (lda), or A^T when TransA (A stored K x M).
// B is K x N row-major (ldb). Single-threaded: callers parallelise over tiles.
//
// The micro-kernel keeps an MR x (2 vectors) block of C in registers; per k it
// loads two vectors of B once and broadcasts MR scalars of A (GCC/Clang vector
// extensions, so it compiles to AVX-512, AVX2 or SSE as the target allows).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/simd.h"

namespace strata::cpu {
inline namespace STRATA_CPU_ISA_NS {

namespace detail {

constexpr int kVecBytes = simd::kBytes;
#ifdef __AVX512F__
constexpr int kRows = 8;  // 16 accumulators + 2 B vectors + 1 broadcast of 32 registers
#else
constexpr int kRows = 6;  // 12 + 2 + 1 of 16 registers
#endif

template <typename T>
using Vec = simd::Vec<T>;
using simd::load;
using simd::store;

// C[MR, NV vectors] block.
template <typename T, bool TransA, int MR, int NV>
inline void microkernel(int K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
                        int64_t ldc, bool accumulate) {
  constexpr int L = kVecBytes / sizeof(T);
  Vec<T> acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec<T>{};
  for (int k = 0; k < K; ++k) {
    const T* b = B + int64_t(k) * ldb;
    Vec<T> bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load(b + v * L);
    for (int r = 0; r < MR; ++r) {
      const T a = TransA ? A[int64_t(k) * lda + r] : A[r * lda + k];
      for (int v = 0; v < NV; ++v) acc[r][v] += a * bv[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      T* c = C + r * ldc + v * L;
      const Vec<T> x = alpha * acc[r][v];
      store(c, accumulate ? load(c) + x : x);
    }
}

// Rows or columns left over by the micro-kernel. Each element is computed
// like the micro-kernel computes it (a sum over k from zero, then times
// alpha), so a result does not depend on which tile it fell in, and hence not
// on the vector width.
template <typename T, bool TransA>
inline void edgekernel(int mr, int nr, int K, T alpha, const T* A, int64_t lda, const T* B,
                       int64_t ldb, T* C, int64_t ldc, bool accumulate) {
  T acc[2 * kVecBytes / sizeof(T)];
  for (int r = 0; r < mr; ++r) {
    for (int v = 0; v < nr; ++v) acc[v] = T(0);
    for (int k = 0; k < K; ++k) {
      const T a = TransA ? A[int64_t(k) * lda + r] : A[r * lda + k];
      const T* b = B + k * ldb;
      for (int v = 0; v < nr; ++v) acc[v] += a * b[v];
    }
    T* c = C + r * ldc;
    for (int v = 0; v < nr; ++v) c[v] = accumulate ? c[v] + alpha * acc[v] : alpha * acc[v];
  }
}

}  // namespace detail

// A column remainder narrower than a vector (e.g. head dimension 8) would
// otherwise run in the scalar edge kernel for the whole K loop: copy that
// strip of B into a zero-padded K x L panel (caller's scratch, at least
// small_gemm_panel_size(K) elements), run the vector kernel into a padded
// tile and keep the first nr columns.
template <typename T, bool TransA>
void narrow_columns(int M, int nr, int K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                    T* C, int64_t ldc, bool accumulate, T* panel, int& rows_done) {
  constexpr int L = detail::kVecBytes / sizeof(T), MR = detail::kRows;
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < L; ++v) panel[int64_t(k) * L + v] = v < nr ? B[int64_t(k) * ldb + v] : T(0);
  T tile[MR * L];
  int i = 0;
  for (; i + MR <= M; i += MR) {
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < L; ++v)
        tile[r * L + v] = accumulate && v < nr ? C[int64_t(i + r) * ldc + v] : T(0);
    const T* a = TransA ? A + i : A + int64_t(i) * lda;
    detail::microkernel<T, TransA, MR, 1>(K, alpha, a, lda, panel, L, tile, L, accumulate);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < nr; ++v) C[int64_t(i + r) * ldc + v] = tile[r * L + v];
  }
  rows_done = i;
}

// Elements of the panel small_gemm may use for a K-long product (any width).
constexpr int64_t small_gemm_panel_size(int64_t K) { return K * 16; }

template <typename T, bool TransA>
void small_gemm(int M, int N, int K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                T* C, int64_t ldc, bool accumulate, T* panel) {
  constexpr int L = detail::kVecBytes / sizeof(T), MR = detail::kRows;
  for (int j = 0; j < N;) {
#ifdef __AVX512F__
    // Exactly three vectors left (head dimension 48): one 8 x 3 block (24 of
    // the 32 registers) instead of an 8 x 2 and an 8 x 1 block, whose single
    // column of FMAs waits on a broadcast each. Same sums, same bits.
    if (N - j == 3 * L) {
      for (int i = 0; i < M; i += MR) {
        const int mr = std::min(MR, M - i);
        const T* a = TransA ? A + i : A + int64_t(i) * lda;
        T* c = C + int64_t(i) * ldc + j;
        if (mr == MR)
          detail::microkernel<T, TransA, MR, 3>(K, alpha, a, lda, B + j, ldb, c, ldc, accumulate);
        else {  // the edge kernel holds at most two vectors per row
          detail::edgekernel<T, TransA>(mr, 2 * L, K, alpha, a, lda, B + j, ldb, c, ldc,
                                        accumulate);
          detail::edgekernel<T, TransA>(mr, L, K, alpha, a, lda, B + j + 2 * L, ldb, c + 2 * L, ldc,
                                        accumulate);
        }
      }
      break;
    }
#endif
    const int nr = N - j >= 2 * L ? 2 * L : (N - j >= L ? L : N - j);
    if (nr < L && M >= MR && K >= 16) {
      int done = 0;
      narrow_columns<T, TransA>(M, nr, K, alpha, A, lda, B + j, ldb, C + j, ldc, accumulate, panel,
                                done);
      if (done < M)
        detail::edgekernel<T, TransA>(M - done, nr, K, alpha,
                                      TransA ? A + done : A + int64_t(done) * lda, lda, B + j, ldb,
                                      C + int64_t(done) * ldc + j, ldc, accumulate);
      j += nr;
      continue;
    }
    for (int i = 0; i < M; i += MR) {
      const int mr = std::min(MR, M - i);
      const T* a = TransA ? A + i : A + int64_t(i) * lda;
      T* c = C + int64_t(i) * ldc + j;
      if (mr == MR && nr == 2 * L)
        detail::microkernel<T, TransA, MR, 2>(K, alpha, a, lda, B + j, ldb, c, ldc, accumulate);
      else if (mr == MR && nr == L)
        detail::microkernel<T, TransA, MR, 1>(K, alpha, a, lda, B + j, ldb, c, ldc, accumulate);
      else
        detail::edgekernel<T, TransA>(mr, nr, K, alpha, a, lda, B + j, ldb, c, ldc, accumulate);
    }
    j += nr;
  }
}

}  // namespace STRATA_CPU_ISA_NS
}  // namespace strata::cpu
