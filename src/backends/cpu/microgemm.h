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
#include <vector>

namespace strata::cpu {

namespace detail {

#ifdef __AVX512F__
constexpr int kVecBytes = 64;
constexpr int kRows = 8;  // 16 accumulators + 2 B vectors + 1 broadcast of 32 registers
#else
constexpr int kVecBytes = 32;
constexpr int kRows = 6;  // 12 + 2 + 1 of 16 registers
#endif

// (The attribute must sit on a non-dependent typedef: GCC ignores it on a
// template alias.)
typedef float VecF __attribute__((vector_size(kVecBytes)));
typedef double VecD __attribute__((vector_size(kVecBytes)));
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  using type = VecF;
};
template <>
struct VecOf<double> {
  using type = VecD;
};
template <typename T>
using Vec = typename VecOf<T>::type;

template <typename T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  static_assert(sizeof v == kVecBytes);
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}

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

// A column remainder narrower than a vector (e.g. head dimension 8) would
// otherwise run in the scalar edge kernel for the whole K loop: copy that
// strip of B into a zero-padded K x L panel, run the vector kernel into a
// padded tile and keep the first nr columns.
template <typename T, bool TransA>
void narrow_columns(int M, int nr, int K, T alpha, const T* A, int64_t lda, const T* B,
                    int64_t ldb, T* C, int64_t ldc, bool accumulate, int& rows_done) {
  constexpr int L = detail::kVecBytes / sizeof(T), MR = detail::kRows;
  thread_local std::vector<T> panel;
  panel.assign(size_t(K) * L, T(0));
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < nr; ++v) panel[size_t(k) * L + v] = B[int64_t(k) * ldb + v];
  T tile[MR * L];
  int i = 0;
  for (; i + MR <= M; i += MR) {
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < L; ++v) tile[r * L + v] = accumulate && v < nr ? C[int64_t(i + r) * ldc + v] : T(0);
    const T* a = TransA ? A + i : A + int64_t(i) * lda;
    detail::microkernel<T, TransA, MR, 1>(K, alpha, a, lda, panel.data(), L, tile, L, accumulate);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < nr; ++v) C[int64_t(i + r) * ldc + v] = tile[r * L + v];
  }
  rows_done = i;
}

template <typename T, bool TransA>
void small_gemm(int M, int N, int K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
                T* C, int64_t ldc, bool accumulate) {
  constexpr int L = detail::kVecBytes / sizeof(T), MR = detail::kRows;
  for (int j = 0; j < N;) {
    const int nr = N - j >= 2 * L ? 2 * L : (N - j >= L ? L : N - j);
    if (nr < L && M >= MR && K >= 16) {
      int done = 0;
      narrow_columns<T, TransA>(M, nr, K, alpha, A, lda, B + j, ldb, C + j, ldc, accumulate, done);
      if (done < M)
        detail::edgekernel<T, TransA>(M - done, nr, K, alpha,
                                      TransA ? A + done : A + int64_t(done) * lda, lda, B + j,
                                      ldb, C + int64_t(done) * ldc + j, ldc, accumulate);
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

}  // namespace strata::cpu
