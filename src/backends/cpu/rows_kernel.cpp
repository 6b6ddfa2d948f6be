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
struct V16 {
  __m512 v;
};
inline V16 zero16() { return {_mm512_setzero_ps()}; }
inline V16 load16(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 load16(const uint16_t* p) {  // bf16 bits -> float
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
}
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
inline __m256 widen8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline V16 load16(const uint16_t* p) { return {widen8(p), widen8(p + 8)}; }
inline void fma16(V16& acc, V16 a, V16 b) {
  acc.lo = _mm256_fmadd_ps(a.lo, b.lo, acc.lo);
  acc.hi = _mm256_fmadd_ps(a.hi, b.hi, acc.hi);
}
inline __m256 halves_sum(V16 x) { return _mm256_add_ps(x.lo, x.hi); }
#endif

inline float widen(float x) { return x; }
inline float widen(uint16_t bf16) {
  const uint32_t bits = uint32_t(bf16) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Lanes summed pairwise: lane j += lane j + 8, then j + 4, then j + 2, j + 1.
inline float sum_lanes(V16 x) {
  const __m256 s8 = halves_sum(x);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // lanes 0+2, 1+3
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// Rows [0, MR) of C. B is float, or bf16 bits widened on the fly.
template <int MR, typename TB>
void rows(int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const TB* B, int64_t ldb,
          float beta, float* C, int64_t ldc) {
  // One OpenMP region only when there is enough work to share (decoding
  // calls this hundreds of times per token; a region costs microseconds).
#pragma omp parallel for schedule(static) if (N * K * MR >= (int64_t(1) << 16))
  for (int64_t n = 0; n < N; ++n) {
    const TB* b = B + n * ldb;
    V16 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = zero16();
    int64_t k = 0;
    for (; k + kLanes <= K; k += kLanes) {
      const V16 bv = load16(b + k);
      for (int m = 0; m < MR; ++m) fma16(acc[m], load16(A + m * lda + k), bv);
    }
    if (k < K) {  // the last K mod 16 columns, zero-padded to a full vector
      alignas(64) float bt[kLanes] = {}, at[kLanes] = {};
      for (int j = 0; k + j < K; ++j) bt[j] = widen(b[k + j]);
      const V16 bv = load16(bt);
      for (int m = 0; m < MR; ++m) {
        for (int j = 0; k + j < K; ++j) at[j] = A[m * lda + k + j];
        fma16(acc[m], load16(at), bv);
      }
    }
    for (int m = 0; m < MR; ++m) {
      float& c = C[m * ldc + n];
      const float dot = sum_lanes(acc[m]);
      c = beta == 0.0f ? alpha * dot : alpha * dot + beta * c;
    }
  }
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

template <int MR>
void rows_bf16(int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
#pragma omp parallel for schedule(static) if (N * K * MR >= (int64_t(1) << 16))
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t* b = B + n * ldb;
    V16 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = zero16();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32)
      for (int m = 0; m < MR; ++m) pair_fma(acc[m], A + m * lda + k, b + k);
    if (k < K) {
      alignas(64) uint16_t bt[32] = {};
      for (int j = 0; k + j < K; ++j) bt[j] = b[k + j];
      for (int m = 0; m < MR; ++m) pair_fma(acc[m], A + m * lda + k, bt);
    }
    for (int m = 0; m < MR; ++m) {
      float& c = C[m * ldc + n];
      const float dot = sum_lanes(acc[m]);
      c = beta == 0.0f ? alpha * dot : alpha * dot + beta * c;
    }
  }
}

template <int MR, bool Pairs, typename TB>
void run(int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const TB* B, int64_t ldb,
         float beta, float* C, int64_t ldc) {
  if constexpr (Pairs)
    rows_bf16<MR>(N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    rows<MR>(N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <bool Pairs, typename TB>
void groups(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const TB* B,
            int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const float* a = A + m0 * lda;
    float* c = C + m0 * ldc;
    switch (M - m0 < 8 ? M - m0 : 8) {
      case 1:
        run<1, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      case 2:
        run<2, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      case 3:
        run<3, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      case 4:
        run<4, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      case 5:
        run<5, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      case 6:
        run<6, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      case 7:
        run<7, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
      default:
        run<8, Pairs>(N, K, alpha, a, lda, B, ldb, beta, c, ldc);
        break;
    }
  }
}

}  // namespace

void few_rows_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  groups<false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void few_rows_gemm_nt_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
                           int64_t ldc) {
  groups<true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace STRATA_CPU_ISA_NS
}  // namespace strata::cpu
