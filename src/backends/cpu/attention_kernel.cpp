// Causal grouped-query attention on the CPU, memory-efficient.
//
// Forward: keys are transposed once per (batch, kv head); then per (batch,
// query head, tile of kTile query rows): S = Q K^T / sqrt(D) for the tile
// (kTile x visible keys, in thread scratch), causal softmax in place, O = P V.
// Only O and the row log-sum-exp are kept.
//
// Backward, per (batch, kv head), with K, dK and dV in contiguous T x D
// copies: for every query head of the group and every tile, recompute P from
// the saved log-sum-exp, then
//   dP = dO V^T,  dS = P * (dP - rowsum(dO * O)) / sqrt(D),
//   dQ = dS K,    dK += dS^T Q,    dV += P^T dO.
// A task owns one kv head, so dK and dV accumulate without races.
//
// Shapes are checked and scratch is allocated by the caller (attention.cpp);
// see attention_kernel.h for why this file allocates nothing and throws nothing.
//
// Trade-off: a tile's whole score row is materialised (kTile x T in scratch per
// thread, not T x T per head), which keeps the softmax exact and simple; for the
// sequence lengths a CPU trains on this is a few hundred KiB per thread.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/attention_kernel.h"
#include "backends/cpu/microgemm.h"
#include "backends/cpu/vec_math.h"

namespace strata::cpu {
inline namespace STRATA_CPU_ISA_NS {
namespace {

using attention::kTile;

inline int min_int(int a, int b) { return a < b ? a : b; }

// dst[D][ld] = src[n][stride] transposed (first D columns of each row), in
// blocks of 16 rows so every store fills a cache line and the rows being read
// stay in L1.
template <typename T>
void transpose_rows(T* dst, int64_t ld, const T* src, int64_t stride, int n, int D) {
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int j1 = min_int(n, j0 + 16);
    for (int c = 0; c < D; ++c) {
      T* d = dst + int64_t(c) * ld;
      for (int j = j0; j < j1; ++j) d[j] = src[int64_t(j) * stride + c];
    }
  }
}

}  // namespace

template <typename T>
void attention_forward_kernel(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv, int D,
                              T* KT_all, T* scratch, int64_t per_thread) {
  const int64_t QS = int64_t(Hq + 2 * Hkv) * D, OS = int64_t(Hq) * D;
  const int group = Hq / Hkv;
  const int ntiles = (T_ + kTile - 1) / kTile;
  const int64_t ld = attention::stride(T_);
  // Keys transposed once per (batch, kv head): KT[b][g] is D x T. Values
  // packed: VP[b][g] is T x D, so O = P V streams contiguous rows instead of
  // one row per key at the qkv row stride (2304 floats apart in 12L-768).
  T* VP_all = KT_all + int64_t(B) * Hkv * D * ld;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < Hkv; ++g) {
      transpose_rows(KT_all + (int64_t(b) * Hkv + g) * D * ld, ld,
                     qkv + int64_t(b) * T_ * QS + int64_t(Hq + g) * D, QS, T_, D);
      T* vp = VP_all + (int64_t(b) * Hkv + g) * T_ * D;
      const T* v = qkv + int64_t(b) * T_ * QS + int64_t(Hq + Hkv + g) * D;
      for (int j = 0; j < T_; ++j)
        std::memcpy(vp + int64_t(j) * D, v + int64_t(j) * QS, sizeof(T) * D);
    }
  const T scale = T(1) / std::sqrt(T(D));

#pragma omp parallel
  {
    T* S = scratch + omp_get_thread_num() * per_thread;
    T* panel = S + int64_t(kTile) * ld;
#pragma omp for collapse(3) schedule(dynamic)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hq; ++h)
        for (int tile = 0; tile < ntiles; ++tile) {
          const int i0 = tile * kTile, i1 = min_int(T_, i0 + kTile), tq = i1 - i0, nk = i1;
          const int g = h / group;
          const T* base = qkv + int64_t(b) * T_ * QS;
          const T* q = base + int64_t(i0) * QS + int64_t(h) * D;
          const T* vp = VP_all + (int64_t(b) * Hkv + g) * T_ * D;
          const T* KT = KT_all + (int64_t(b) * Hkv + g) * D * ld;
          small_gemm<T, false>(tq, nk, D, scale, q, QS, KT, ld, S, ld, false, panel);
          T* lse_row = lse + (int64_t(b) * Hq + h) * T_;
          for (int r = 0; r < tq; ++r) {
            T* s = S + int64_t(r) * ld;
            const int n = i0 + r + 1;  // visible keys 0..i
            const T m = row_max(s, n);
            const T sum = exp_shift_sum(s, s, n, m);
            const T inv = T(1) / sum;
#pragma omp simd
            for (int j = 0; j < n; ++j) s[j] *= inv;
            for (int j = n; j < nk; ++j) s[j] = T(0);
            lse_row[i0 + r] = m + std::log(sum);
          }
          T* o = out + (int64_t(b) * T_ + i0) * OS + int64_t(h) * D;
          small_gemm<T, false>(tq, D, nk, T(1), S, ld, vp, D, o, OS, false, panel);
        }
  }
}

template <typename T>
void attention_backward_kernel(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                               int B, int T_, int Hq, int Hkv, int D, T* scratch,
                               int64_t per_thread) {
  const int64_t QS = int64_t(Hq + 2 * Hkv) * D, OS = int64_t(Hq) * D;
  const int group = Hq / Hkv;
  const int ntiles = (T_ + kTile - 1) / kTile;
  const int64_t ld = attention::stride(T_);
  const T scale = T(1) / std::sqrt(T(D));

#pragma omp parallel
  {
    T* KT = scratch + omp_get_thread_num() * per_thread;
    T* VT = KT + int64_t(D) * ld;
    T* P = VT + int64_t(D) * ld;
    T* dS = P + int64_t(kTile) * ld;
    T* Drow = dS + int64_t(kTile) * ld;
    T* panel = Drow + kTile;
    T* Kp = panel + attention::panel_elements(T_, D);  // T x D each
    T* dKp = Kp + int64_t(T_) * D;
    T* dVp = dKp + int64_t(T_) * D;
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; ++b)
      for (int g = 0; g < Hkv; ++g) {
        const T* base = qkv + int64_t(b) * T_ * QS;
        T* dbase = dqkv + int64_t(b) * T_ * QS;
        const T* k = base + int64_t(Hq + g) * D;
        const T* v = base + int64_t(Hq + Hkv + g) * D;
        T* dk = dbase + int64_t(Hq + g) * D;
        T* dv = dbase + int64_t(Hq + Hkv + g) * D;
        for (int j = 0; j < T_; ++j)
          std::memcpy(Kp + int64_t(j) * D, k + int64_t(j) * QS, sizeof(T) * D);
        std::memset(dKp, 0, sizeof(T) * size_t(T_) * D);
        std::memset(dVp, 0, sizeof(T) * size_t(T_) * D);
        transpose_rows(KT, ld, k, QS, T_, D);
        transpose_rows(VT, ld, v, QS, T_, D);
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const T* lse_row = lse + (int64_t(b) * Hq + h) * T_;
          for (int tile = 0; tile < ntiles; ++tile) {
            const int i0 = tile * kTile, i1 = min_int(T_, i0 + kTile), tq = i1 - i0, nk = i1;
            const T* q = base + int64_t(i0) * QS + int64_t(h) * D;
            T* dq = dbase + int64_t(i0) * QS + int64_t(h) * D;
            const int64_t orow = (int64_t(b) * T_ + i0) * OS + int64_t(h) * D;
            const T* o = out + orow;
            const T* dO = dout + orow;
            // P = softmax(scale * Q K^T), recomputed from the saved lse.
            small_gemm<T, false>(tq, nk, D, scale, q, QS, KT, ld, P, ld, false, panel);
            for (int r = 0; r < tq; ++r) {
              T* p = P + int64_t(r) * ld;
              const int n = i0 + r + 1;
              scaled_exp_shift(p, p, n, lse_row[i0 + r], T(1));
              for (int j = n; j < nk; ++j) p[j] = T(0);
              const T* orr = o + int64_t(r) * OS;
              const T* dor = dO + int64_t(r) * OS;
              // In order and fused like the micro-kernel's sums (the compiler may
              // otherwise split the products from an in-order vector sum), so
              // rowsum(dO * O) equals dO V^T where O is a single row of V.
              T d = 0;
              for (int c = 0; c < D; ++c) d = std::fma(orr[c], dor[c], d);
              Drow[r] = d;
            }
            // dS = P * (dO V^T - Drow) * scale
            small_gemm<T, false>(tq, nk, D, T(1), dO, OS, VT, ld, dS, ld, false, panel);
            for (int r = 0; r < tq; ++r) {
              T* ds = dS + int64_t(r) * ld;
              const T* p = P + int64_t(r) * ld;
              const T d = Drow[r];
#pragma omp simd
              for (int j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - d) * scale;
            }
            small_gemm<T, false>(tq, D, nk, T(1), dS, ld, Kp, D, dq, QS, false, panel);
            small_gemm<T, true>(nk, D, tq, T(1), dS, ld, q, QS, dKp, D, true, panel);
            small_gemm<T, true>(nk, D, tq, T(1), P, ld, dO, OS, dVp, D, true, panel);
          }
        }
        for (int j = 0; j < T_; ++j) {
          std::memcpy(dk + int64_t(j) * QS, dKp + int64_t(j) * D, sizeof(T) * D);
          std::memcpy(dv + int64_t(j) * QS, dVp + int64_t(j) * D, sizeof(T) * D);
        }
      }
  }
}

template void attention_forward_kernel<float>(float*, float*, const float*, int, int, int, int, int,
                                              float*, float*, int64_t);
template void attention_forward_kernel<double>(double*, double*, const double*, int, int, int, int,
                                               int, double*, double*, int64_t);
template void attention_backward_kernel<float>(float*, const float*, const float*, const float*,
                                               const float*, int, int, int, int, int, float*,
                                               int64_t);
template void attention_backward_kernel<double>(double*, const double*, const double*,
                                                const double*, const double*, int, int, int, int,
                                                int, double*, int64_t);

}  // namespace STRATA_CPU_ISA_NS
}  // namespace strata::cpu
