#include "backends/cpu/rows_kernel.h"

#include <immintrin.h>

namespace strata::cpu {
inline namespace STRATA_CPU_ISA_NS {
namespace {

constexpr int kLanes = 16;

// 16 lanes: one zmm register under AVX-512, two ymm under AVX2, with the
// same lane-wise arithmetic (fused multiply-adds), so both builds give the
// same bits.
#ifdef __AVX512F__
// GCC 12 warns about _mm512_undefined inside the extract intrinsics once they
// are inlined here; the value is defined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
struct V16 {
  __m512 v;
};
inline V16 zero16() { return {_mm512_setzero_ps()}; }
inline V16 load16(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void fma16(V16& acc, V16 a, V16 b) { acc.v = _mm512_fmadd_ps(a.v, b.v, acc.v); }
inline __m256 halves_sum(V16 x) {  // lane j + lane j + 8
  return _mm256_add_ps(_mm512_castps512_ps256(x.v), _mm512_extractf32x8_ps(x.v, 1));
}
#else
struct V16 {
  __m256 lo, hi;
};
inline V16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void fma16(V16& acc, V16 a, V16 b) {
  acc.lo = _mm256_fmadd_ps(a.lo, b.lo, acc.lo);
  acc.hi = _mm256_fmadd_ps(a.hi, b.hi, acc.hi);
}
inline __m256 halves_sum(V16 x) { return _mm256_add_ps(x.lo, x.hi); }
#endif

// Lanes summed pairwise: lane j += lane j + 8, then j + 4, then j + 2, j + 1.
inline float sum_lanes(V16 x) {
  const __m256 s8 = halves_sum(x);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // lanes 0+2, 1+3
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// bf16 B, 32 columns per step: the even and the odd bf16 of each 32-bit
// word become two float vectors with one shift and one mask (no widening
// shuffle), so lane j takes columns k + 2j and k + 2j + 1 of each 32-column
// chunk; A comes in the matching layout (bf16_pair_layout), and the zero
// padding of A to a multiple of 32 makes the tail of B harmless.
#ifdef __AVX512F__
inline void pair_fma(V16& acc, const float* a, const uint16_t* b) {
  const __m512i x = _mm512_loadu_si512(b);
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xFFFF0000u))));
  acc.v = _mm512_fmadd_ps(_mm512_loadu_ps(a), even, acc.v);
  acc.v = _mm512_fmadd_ps(_mm512_loadu_ps(a + 16), odd, acc.v);
}
#else
inline void pair_fma(V16& acc, const float* a, const uint16_t* b) {
  const __m256i mask = _mm256_set1_epi32(int(0xFFFF0000u));
  const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
  acc.lo =
      _mm256_fmadd_ps(_mm256_loadu_ps(a), _mm256_castsi256_ps(_mm256_slli_epi32(xl, 16)), acc.lo);
  acc.hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + 8), _mm256_castsi256_ps(_mm256_slli_epi32(xh, 16)),
                           acc.hi);
  acc.lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + 16), _mm256_castsi256_ps(_mm256_and_si256(xl, mask)),
                           acc.lo);
  acc.hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + 24), _mm256_castsi256_ps(_mm256_and_si256(xh, mask)),
                           acc.hi);
}
#endif

// The two kinds of B: one step of the dot products (kStep columns), and the
// last K mod kStep columns zero-padded to a step.
struct F32Rows {  // lane j takes the columns k = j mod 16
  using TB = float;
  static constexpr int kStep = kLanes;
  static void step(V16& acc, const float* a, const float* b) { fma16(acc, load16(a), load16(b)); }
  static void tail(V16& acc, const float* a, const float* b, int64_t r) {
    alignas(64) float at[kStep] = {}, bt[kStep] = {};
    for (int64_t j = 0; j < r; ++j) at[j] = a[j], bt[j] = b[j];
    step(acc, at, bt);
  }
};
struct Bf16Rows {  // lane j takes the pairs 2j, 2j + 1 of 32 columns; A in pair layout
  using TB = uint16_t;
  static constexpr int kStep = 32;
  static void step(V16& acc, const float* a, const uint16_t* b) { pair_fma(acc, a, b); }
  static void tail(V16& acc, const float* a, const uint16_t* b, int64_t r) {
    alignas(64) uint16_t bt[kStep] = {};  // A is zero-padded to the step already
    for (int64_t j = 0; j < r; ++j) bt[j] = b[j];
    step(acc, a, bt);
  }
};

// Rows [0, MR) of C.
template <int MR, typename S>
void rows(int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const typename S::TB* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  // One OpenMP region only when there is enough work to share (decoding
  // calls this hundreds of times per token; a region costs microseconds).
#pragma omp parallel for schedule(static) if (N * K * MR >= (int64_t(1) << 16))
  for (int64_t n = 0; n < N; ++n) {
    const typename S::TB* b = B + n * ldb;
    V16 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = zero16();
    int64_t k = 0;
    for (; k + S::kStep <= K; k += S::kStep)
      for (int m = 0; m < MR; ++m) S::step(acc[m], A + m * lda + k, b + k);
    if (k < K)
      for (int m = 0; m < MR; ++m) S::tail(acc[m], A + m * lda + k, b + k, K - k);
    for (int m = 0; m < MR; ++m) {
      float& c = C[m * ldc + n];
      const float dot = sum_lanes(acc[m]);
      c = beta == 0.0f ? alpha * dot : alpha * dot + beta * c;
    }
  }
}

template <typename S>
void groups(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const typename S::TB* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  using Kernel = void (*)(int64_t, int64_t, float, const float*, int64_t, const typename S::TB*,
                          int64_t, float, float*, int64_t);
  static constexpr Kernel kRows[8] = {rows<1, S>, rows<2, S>, rows<3, S>, rows<4, S>,
                                      rows<5, S>, rows<6, S>, rows<7, S>, rows<8, S>};
  for (int64_t m0 = 0; m0 < M; m0 += 8)
    kRows[(M - m0 < 8 ? M - m0 : 8) - 1](N, K, alpha, A + m0 * lda, lda, B, ldb, beta, C + m0 * ldc,
                                         ldc);
}

}  // namespace

void few_rows_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  groups<F32Rows>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void few_rows_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  groups<Bf16Rows>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace STRATA_CPU_ISA_NS
}  // namespace strata::cpu
