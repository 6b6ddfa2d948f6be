// Causal grouped-query attention on tensor cores, FlashAttention-2 style
// (Dao 2023): tiles of 64 rows in shared memory as bf16, products by
// mma.sync m16n8k16 (bf16 operands, fp32 accumulation), fragments loaded
// with ldmatrix, an online softmax in fp32 registers, the log-sum-exp saved
// for the backward, which recomputes the probabilities tile by tile.
//
// A block is 4 warps; a warp owns 16 rows of its block's 64 (queries in the
// forward and dq kernels, keys in the dk/dv kernel) and keeps their
// accumulators in registers, in the C-fragment layout of simt.h. The
// backward is two kernels so that every output element is written by one
// warp, with a fixed summation order (deterministic, no atomics): dq per
// query tile over the key tiles, dk and dv per key tile over the queries of
// every head of its group. The price is that dq recomputes S and dP (7 tile
// products per tile pair instead of FlashAttention-2's 5 with atomic dq).
//
// Inputs and outputs are the activations' storage E (ops/dtype.h): fp32
// tiles are rounded to bf16 as they are staged into shared memory (what the
// bf16 GEMMs do with their operands), bf16 tiles are copied as they are, and
// outputs are written in E (bf16: rounded once). Each kernel is a device
// body template on <D, E> behind two entry points, k_flash_<x> (fp32) and
// k_flash_<x>_bf16, so profiles and launch bounds name them apart. Head dimensions 16, 32, 64 and
// 128 (a compile-time D); anything else runs the reference kernels (attention.cuh), which stay as
// the fp32 path and the reference the tests compare with.
//
// The tiles a loop walks (K/V in the forward and dq kernels, Q/dO in the
// dk/dv kernel) are double-buffered: the next tile is staged while the warps
// multiply the current one, with cp.async where the storage is bf16 (the
// copies bypass registers and overlap the tensor-core work), by plain loads
// and rounding where it is fp32. Two barriers a tile, as before: one before
// a buffer is overwritten, one before it is read.
//
// Shared memory rows are D bf16; their 16-byte chunks are swizzled (chunk c
// of row r at c ^ (r % 8), fewer bits when a row has fewer than 8 chunks) so
// the 8 rows one ldmatrix phase reads sit in different banks.
#pragma once

#include <type_traits>

#include "backends/cuda/kernels/attention_view.cuh"
#include "backends/cuda/kernels/common.cuh"
#include "core/error.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;
constexpr int kFlashRows = 16 * kFlashWarps;  // the rows a block owns
constexpr int kFlashKeys = 64;                // keys per tile (forward, dq)
constexpr int kFlashQueries = 32;             // queries per tile (dk/dv)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline bool flash_head_dim(int D) { return D == 16 || D == 32 || D == 64 || D == 128; }

// Element offset of chunk c (8 elements) of row r in a swizzled tile.
template <int D>
STRATA_DEVICE int swz(int r, int c) {
  constexpr int n = D / 8 < 8 ? D / 8 : 8;
  return r * D + (c ^ (r % n)) * 8;
}

// Stages `rows` rows of D values (row i at src + i * stride; fp32, rounded,
// or bf16, copied) as bf16 into a swizzled tile; rows at or past `valid` are
// zeros. All threads of the block.
template <int D, typename E>
STRATA_DEVICE void stage_tile(uint16_t* tile, const E* src, int64_t stride, int rows, int valid) {
  constexpr int chunks = D / 8;
  for (int ci = int(threadIdx.x); ci < rows * chunks; ci += int(blockDim.x)) {
    const int r = ci / chunks, c = ci % chunks;
    uint32_t w[4] = {0, 0, 0, 0};
    if (r < valid) {
      const E* at = src + int64_t(r) * stride + c * 8;
      if constexpr (std::is_same_v<E, ops::bf16>) {
        // 8 bf16 = four 32-bit words (rows and chunks start at multiples of 8 elements).
        const uint32_t* wsrc = reinterpret_cast<const uint32_t*>(at);
        for (int e = 0; e < 4; ++e) w[e] = wsrc[e];
      } else {
        for (int half = 0; half < 2; ++half) {
          float f[4];
          load_f32x4(f, at + 4 * half);
          w[2 * half] = pack_bf16x2(f[0], f[1]);
          w[2 * half + 1] = pack_bf16x2(f[2], f[3]);
        }
      }
    }
    uint32_t* dst = reinterpret_cast<uint32_t*>(tile + swz<D>(r, c));
    for (int e = 0; e < 4; ++e) dst[e] = w[e];
  }
}

// As stage_tile, asynchronously where E is bf16: each 16-byte chunk by
// cp.async (zeros past `valid`, a plain copy where a source chunk is not
// 16-byte aligned), to be waited for with cp_async_wait and a barrier. fp32
// is rounded through registers (stage_tile), at once.
template <int D, typename E>
STRATA_DEVICE void stage_tile_async(uint16_t* tile, const E* src, int64_t stride, int rows,
                                    int valid) {
  if constexpr (std::is_same_v<E, ops::bf16>) {
    constexpr int chunks = D / 8;
    for (int ci = int(threadIdx.x); ci < rows * chunks; ci += int(blockDim.x)) {
      const int r = ci / chunks, c = ci % chunks;
      uint16_t* dst = tile + swz<D>(r, c);
      const bool ok = r < valid;
      const E* at = ok ? src + int64_t(r) * stride + c * 8 : src;
      if (!ok || (reinterpret_cast<uintptr_t>(at) & 15u) == 0) {
        cp_async16(dst, at, ok);
      } else {
        const uint32_t* wsrc = reinterpret_cast<const uint32_t*>(at);
        uint32_t* wdst = reinterpret_cast<uint32_t*>(dst);
        for (int e = 0; e < 4; ++e) wdst[e] = wsrc[e];
      }
    }
  } else {
    stage_tile<D>(tile, src, stride, rows, valid);
  }
}

// A two-stage buffer of tile pairs (K and V, or Q and dO), `rows` rows of D
// each: stage `buf`'s first tile, its second `rows` * D further on.
template <int D>
STRATA_DEVICE uint16_t* pair_stage(uint16_t* stages, int rows, int buf) {
  return stages + 2 * buf * rows * D;
}
// Stages `rows` rows of `first` and of `second` (strides apart; rows at or
// past `valid` are zeros) into stage `buf` (stage_tile_async).
template <int D, typename E>
STRATA_DEVICE void stage_pair(uint16_t* stages, int rows, int buf, int valid, const E* first,
                              int64_t first_stride, const E* second, int64_t second_stride) {
  uint16_t* at = pair_stage<D>(stages, rows, buf);
  stage_tile_async<D>(at, first, first_stride, rows, valid);
  stage_tile_async<D>(at + rows * D, second, second_stride, rows, valid);
}

// The head of a double-buffered loop's iteration: when there is a next tile,
// waits for the other buffer's readers (the previous tile), stages the next
// tile into it (`stage`) and waits for the current tile's copies; then a
// barrier makes the current tile visible to every warp.
template <typename Stage>
STRATA_DEVICE void next_tile(bool more, const Stage& stage) {
  if (more) {
    __syncthreads();
    stage();
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// An A operand (16 rows from r0, k columns k0 .. k0+15) with ldmatrix; the
// same addresses with .trans give the B operands of two n8 tiles (columns n0
// and n0 + 8) from a tile stored as rows of k (B[k][n] = tile[k][n]).
template <int D>
STRATA_DEVICE const uint16_t* frag_rows(const uint16_t* tile, int r0, int c0, int lane) {
  return tile + swz<D>(r0 + lane % 16, c0 / 8 + lane / 16);
}
// B operands of two n8 tiles (n0, n0 + 8) over k0 .. k0+15 from a tile
// stored as rows of n (B[k][n] = tile[n][k]): b of tile n0 in r[0..1], of
// n0 + 8 in r[2..3].
template <int D>
STRATA_DEVICE const uint16_t* frag_cols(const uint16_t* tile, int n0, int k0, int lane) {
  return tile + swz<D>(n0 + (lane / 16) * 8 + lane % 8, k0 / 8 + (lane / 8) % 2);
}

// acc[N/8][4] += A (16 x 16*KS, from `a` rows r0) times B^T where B is a tile
// stored as rows of n (the N columns n0 ..): S = Q K^T and its kin.
template <int D, int N>
STRATA_DEVICE void mma_abt(float (&acc)[N / 8][4], const uint16_t* a, int r0, const uint16_t* b,
                           int n0, int lane) {
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t af[4];
    ldmatrix_x4(af, frag_rows<D>(a, r0, k0, lane));
    for (int np = 0; np < N / 16; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, frag_cols<D>(b, n0 + np * 16, k0, lane));
      const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
      mma_bf16_16816(acc[2 * np], af, b0);
      mma_bf16_16816(acc[2 * np + 1], af, b1);
    }
  }
}

// out[D/8][4] += P (16 x K, C fragments p[K/8][4], rounded to bf16) times
// the tile rows k0 .. k0+K-1 (B[k][n] = tile[k0 + k][n]): O += P V and kin.
template <int D, int K>
STRATA_DEVICE void mma_pb(float (&out)[D / 8][4], const float (&p)[K / 8][4], const uint16_t* tile,
                          int k0, int lane) {
  for (int kk = 0; kk < K / 16; ++kk) {
    const uint32_t af[4] = {pack_bf16x2(p[2 * kk][0], p[2 * kk][1]),
                            pack_bf16x2(p[2 * kk][2], p[2 * kk][3]),
                            pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                            pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, frag_rows<D>(tile, k0 + 16 * kk, 16 * dp, lane));
      const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
      mma_bf16_16816(out[2 * dp], af, b0);
      mma_bf16_16816(out[2 * dp + 1], af, b1);
    }
  }
}

template <int N>
STRATA_DEVICE void zero_acc(float (&a)[N][4]) {
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < 4; ++i) a[n][i] = 0.f;
}

// The max / sum of a C-fragment row over the 4 lanes that hold it.
STRATA_DEVICE float quad_max(float v) {
  v = g_max(v, __shfl_xor_sync(kFull, v, 1));
  return g_max(v, __shfl_xor_sync(kFull, v, 2));
}
STRATA_DEVICE float quad_sum(float v) {
  v += __shfl_xor_sync(kFull, v, 1);
  return v + __shfl_xor_sync(kFull, v, 2);
}

// ------------------------------------------------------------------ forward
// Grid (query tiles, Hq, B), the heaviest (last) tiles first. out rows
// Hq*D apart; lse [B, Hq, Tq] (natural log; may be null).
template <int D, typename E>
STRATA_DEVICE void flash_forward_body(E* out, float* lse, const AttnView<E>& a) {
  STRATA_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* qs = smem;
  uint16_t* kv = qs + kFlashRows * D;  // two stages of a K tile and a V tile
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int g = lane / 4, t = lane % 4;
  const int q0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * kFlashRows;
  const int h = int(blockIdx.y), b = int(blockIdx.z), kvh = h / (a.Hq / a.Hkv);
  const E* kb = a.k + int64_t(b) * a.kv_batch + int64_t(kvh) * a.kv_head;
  const E* vb = a.v + int64_t(b) * a.kv_batch + int64_t(kvh) * a.kv_head;
  stage_tile_async<D>(qs, a.q + (int64_t(b) * a.Tq + q0) * a.q_stride + int64_t(h) * D, a.q_stride,
                      kFlashRows, a.Tq - q0);
  const float scale2 = kLog2e / g_sqrt(float(D));
  const int last_row = g_min(q0 + kFlashRows, a.Tq) - 1;
  const int nk = last_row + a.key_offset + 1;  // keys the block's rows see, at most
  int rows[2], lim[2];
  float m[2], l[2];
  for (int r = 0; r < 2; ++r) {
    rows[r] = q0 + 16 * warp + g + 8 * r;
    lim[r] = g_min(rows[r], a.Tq - 1) + a.key_offset;  // padded rows act as the last one
    m[r] = g_neg_inf<float>();
    l[r] = 0.f;
  }
  float o[D / 8][4];
  zero_acc(o);
  const auto stage_kv = [&](int k0, int buf) {
    stage_pair<D>(kv, kFlashKeys, buf, nk - k0, kb + int64_t(k0) * a.kv_stride, a.kv_stride,
                  vb + int64_t(k0) * a.kv_stride, a.kv_stride);
  };
  stage_kv(0, 0);
  cp_async_commit();
  int buf = 0;
  for (int k0 = 0; k0 < nk; k0 += kFlashKeys, buf ^= 1) {
    next_tile(k0 + kFlashKeys < nk, [&] { stage_kv(k0 + kFlashKeys, buf ^ 1); });
    const uint16_t* ks = pair_stage<D>(kv, kFlashKeys, buf);
    const uint16_t* vs = ks + kFlashKeys * D;
    float s[kFlashKeys / 8][4];
    zero_acc(s);
    mma_abt<D, kFlashKeys>(s, qs, 16 * warp, ks, 0, lane);
    float mx[2] = {g_neg_inf<float>(), g_neg_inf<float>()};
    for (int n = 0; n < kFlashKeys / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + 8 * n + 2 * t + (i & 1);
        s[n][i] = key <= lim[i >> 1] ? s[n][i] * scale2 : g_neg_inf<float>();
        mx[i >> 1] = g_max(mx[i >> 1], s[n][i]);
      }
    float alpha[2];
    for (int r = 0; r < 2; ++r) {
      const float mn = g_max(m[r], quad_max(mx[r]));
      alpha[r] = g_exp2(m[r] - mn);  // 0 on the first tile (m = -inf)
      m[r] = mn;
      l[r] *= alpha[r];
    }
    for (int n = 0; n < kFlashKeys / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        s[n][i] = g_exp2(s[n][i] - m[i >> 1]);
        l[i >> 1] += s[n][i];
      }
    for (int n = 0; n < D / 8; ++n)
      for (int i = 0; i < 4; ++i) o[n][i] *= alpha[i >> 1];
    mma_pb<D, kFlashKeys>(o, s, vs, 0, lane);
  }
  for (int r = 0; r < 2; ++r) l[r] = quad_sum(l[r]);
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= a.Tq) continue;
    E* orow = out + (int64_t(b) * a.Tq + rows[r]) * (int64_t(a.Hq) * D) + int64_t(h) * D;
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e) orow[8 * n + 2 * t + e] = act_store<E>(o[n][2 * r + e] / l[r]);
    if (lse && t == 0) lse[(int64_t(b) * a.Hq + h) * a.Tq + rows[r]] = (m[r] + g_log2(l[r])) * kLn2;
  }
}
STRATA_LAUNCH_BOUNDS(k_flash_forward, kFlashThreads);
template <int D>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_flash_forward) void k_flash_forward(float* out, float* lse,
                                                                     AttnView<float> a) {
  flash_forward_body<D>(out, lse, a);
}
STRATA_LAUNCH_BOUNDS(k_flash_forward_bf16, kFlashThreads);
template <int D>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_flash_forward_bf16) void k_flash_forward_bf16(
    ops::bf16* out, float* lse, AttnView<ops::bf16> a) {
  flash_forward_body<D>(out, lse, a);
}

// ----------------------------------------------------------------- backward
// The layout of qkv (rows W = (Hq + 2 Hkv) D apart) and of dout (Hq D).
template <typename E>
struct FlashBwdOf {
  E* dqkv;
  const E* dout;
  const E* qkv;
  const float* lse;
  const float* delta;
  int B, T, Hq, Hkv;
};
using FlashBwd = FlashBwdOf<float>;

// Keys per tile of the dq kernel: 32 at head dim 128, where a 64-key tile's
// scores and dP (64 registers) beside dq (64) spill on sm_90.
template <int D>
inline constexpr int kFlashDqKeys = D >= 128 ? 32 : kFlashKeys;

// dq of a tile of 64 queries of head h: grid (query tiles, Hq, B).
template <int D, typename E>
STRATA_DEVICE void flash_dq_body(const FlashBwdOf<E>& a) {
  constexpr int KT = kFlashDqKeys<D>;
  STRATA_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* qs = smem;
  uint16_t* dos = qs + kFlashRows * D;
  uint16_t* kv = dos + kFlashRows * D;  // two stages of a K tile and a V tile
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int g = lane / 4, t = lane % 4;
  const int q0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * kFlashRows;
  const int h = int(blockIdx.y), b = int(blockIdx.z), kvh = h / (a.Hq / a.Hkv);
  const int64_t W = int64_t(a.Hq + 2 * a.Hkv) * D;
  const E* base = a.qkv + int64_t(b) * a.T * W;
  stage_tile_async<D>(qs, base + int64_t(q0) * W + int64_t(h) * D, W, kFlashRows, a.T - q0);
  stage_tile_async<D>(dos, a.dout + (int64_t(b) * a.T + q0) * a.Hq * D + int64_t(h) * D,
                      int64_t(a.Hq) * D, kFlashRows, a.T - q0);
  const float scale = 1.f / g_sqrt(float(D)), scale2 = scale * kLog2e;
  int rows[2];
  float lse2[2], delta[2];
  for (int r = 0; r < 2; ++r) {
    rows[r] = q0 + 16 * warp + g + 8 * r;
    const bool ok = rows[r] < a.T;
    const int64_t li = (int64_t(b) * a.Hq + h) * a.T + (ok ? rows[r] : 0);
    lse2[r] = ok ? a.lse[li] * kLog2e : 0.f;
    delta[r] = ok ? a.delta[li] : 0.f;
  }
  const int nk = g_min(q0 + kFlashRows, a.T);
  float dq[D / 8][4];
  zero_acc(dq);
  const auto stage_kv = [&](int k0, int buf) {
    const E* row = base + int64_t(k0) * W;
    stage_pair<D>(kv, KT, buf, nk - k0, row + int64_t(a.Hq + kvh) * D, W,
                  row + int64_t(a.Hq + a.Hkv + kvh) * D, W);
  };
  stage_kv(0, 0);
  cp_async_commit();
  int buf = 0;
  for (int k0 = 0; k0 < nk; k0 += KT, buf ^= 1) {
    next_tile(k0 + KT < nk, [&] { stage_kv(k0 + KT, buf ^ 1); });
    const uint16_t* ks = pair_stage<D>(kv, KT, buf);
    const uint16_t* vs = ks + KT * D;
    float s[KT / 8][4], dp[KT / 8][4];
    zero_acc(s);
    zero_acc(dp);
    mma_abt<D, KT>(s, qs, 16 * warp, ks, 0, lane);
    mma_abt<D, KT>(dp, dos, 16 * warp, vs, 0, lane);
    for (int n = 0; n < KT / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1, key = k0 + 8 * n + 2 * t + (i & 1);
        const float p = key <= rows[r] && rows[r] < a.T ? g_exp2(s[n][i] * scale2 - lse2[r]) : 0.f;
        s[n][i] = p * (dp[n][i] - delta[r]);  // dS
      }
    mma_pb<D, KT>(dq, s, ks, 0, lane);
  }
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= a.T) continue;
    E* drow = a.dqkv + (int64_t(b) * a.T + rows[r]) * W + int64_t(h) * D;
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e) drow[8 * n + 2 * t + e] = act_store<E>(dq[n][2 * r + e] * scale);
  }
}
STRATA_LAUNCH_BOUNDS(k_flash_backward_dq, kFlashThreads);
template <int D>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_flash_backward_dq) void k_flash_backward_dq(FlashBwd a) {
  flash_dq_body<D>(a);
}
STRATA_LAUNCH_BOUNDS(k_flash_backward_dq_bf16, kFlashThreads);
template <int D>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_flash_backward_dq_bf16) void k_flash_backward_dq_bf16(
    FlashBwdOf<ops::bf16> a) {
  flash_dq_body<D>(a);
}

// Queries per tile of the dk/dv kernel: 16 at head dim 128, where dk and dv
// take 128 registers and a 32-query tile spills on sm_80.
template <int D>
inline constexpr int kFlashDkvQueries = D >= 128 ? 16 : kFlashQueries;

// dk and dv of a tile of 64 keys of kv head g: grid (key tiles, Hkv, B).
// Sums over the queries i >= key of every query head of the group, tiles of
// 32 queries staged with their lse and delta.
template <int D, typename E>
STRATA_DEVICE void flash_dkv_body(const FlashBwdOf<E>& a) {
  constexpr int QT = kFlashDkvQueries<D>;
  STRATA_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* ks = smem;
  uint16_t* vs = ks + kFlashRows * D;
  uint16_t* qd = vs + kFlashRows * D;  // two stages of a Q tile and a dO tile
  float* lse2_st = reinterpret_cast<float*>(pair_stage<D>(qd, QT, 2));  // two stages of QT
  float* delta_st = lse2_st + 2 * QT;
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int g = lane / 4, t = lane % 4;
  const int k0 = int(blockIdx.x) * kFlashRows;
  const int kvh = int(blockIdx.y), b = int(blockIdx.z), rep = a.Hq / a.Hkv;
  const int64_t W = int64_t(a.Hq + 2 * a.Hkv) * D;
  const E* base = a.qkv + int64_t(b) * a.T * W;
  stage_tile_async<D>(ks, base + int64_t(k0) * W + int64_t(a.Hq + kvh) * D, W, kFlashRows,
                      a.T - k0);
  stage_tile_async<D>(vs, base + int64_t(k0) * W + int64_t(a.Hq + a.Hkv + kvh) * D, W, kFlashRows,
                      a.T - k0);
  const float scale = 1.f / g_sqrt(float(D)), scale2 = scale * kLog2e;
  int keys[2];
  for (int r = 0; r < 2; ++r) keys[r] = k0 + 16 * warp + g + 8 * r;
  float dk[D / 8][4], dv[D / 8][4];
  zero_acc(dk);
  zero_acc(dv);
  // The query tiles at or after the block's first key, of each head of the
  // group in turn: tile j is head kvh * rep + j / nq, queries i_first + (j % nq) QT.
  const int i_first = k0 / QT * QT, nq = (a.T - i_first + QT - 1) / QT;
  const auto stage_q = [&](int j, int buf) {
    const int h = kvh * rep + j / nq, i0 = i_first + j % nq * QT;
    stage_pair<D>(qd, QT, buf, a.T - i0, base + int64_t(h) * D + int64_t(i0) * W, W,
                  a.dout + (int64_t(b) * a.T + i0) * a.Hq * D + int64_t(h) * D, int64_t(a.Hq) * D);
    const int64_t lb = (int64_t(b) * a.Hq + h) * a.T;
    for (int i = int(threadIdx.x); i < QT; i += int(blockDim.x)) {
      const bool ok = i0 + i < a.T;
      lse2_st[buf * QT + i] = ok ? a.lse[lb + i0 + i] * kLog2e : 0.f;
      delta_st[buf * QT + i] = ok ? a.delta[lb + i0 + i] : 0.f;
    }
  };
  stage_q(0, 0);
  cp_async_commit();
  int buf = 0;
  for (int j = 0; j < rep * nq; ++j, buf ^= 1) {
    next_tile(j + 1 < rep * nq, [&] { stage_q(j + 1, buf ^ 1); });
    const int i0 = i_first + j % nq * QT;
    const uint16_t* qs = pair_stage<D>(qd, QT, buf);
    const uint16_t* dos = qs + QT * D;
    const float* lse2_s = lse2_st + buf * QT;
    const float* delta_s = delta_st + buf * QT;
    float s[QT / 8][4], dp[QT / 8][4];
    zero_acc(s);
    zero_acc(dp);
    mma_abt<D, QT>(s, ks, 16 * warp, qs, 0, lane);    // S^T = K Q^T
    mma_abt<D, QT>(dp, vs, 16 * warp, dos, 0, lane);  // dP^T = V dO^T
    for (int n = 0; n < QT / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const int qi = 8 * n + 2 * t + (i & 1), q = i0 + qi, key = keys[i >> 1];
        const float p = q >= key && q < a.T ? g_exp2(s[n][i] * scale2 - lse2_s[qi]) : 0.f;
        s[n][i] = p;                              // P^T
        dp[n][i] = p * (dp[n][i] - delta_s[qi]);  // dS^T
      }
    mma_pb<D, QT>(dv, s, dos, 0, lane);  // dV += P^T dO
    mma_pb<D, QT>(dk, dp, qs, 0, lane);  // dK += dS^T Q
  }
  STRATA_UNROLL
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= a.T) continue;
    E* dkrow = a.dqkv + (int64_t(b) * a.T + keys[r]) * W + int64_t(a.Hq + kvh) * D;
    E* dvrow = dkrow + int64_t(a.Hkv) * D;
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e) {
        dkrow[8 * n + 2 * t + e] = act_store<E>(dk[n][2 * r + e] * scale);
        dvrow[8 * n + 2 * t + e] = act_store<E>(dv[n][2 * r + e]);
      }
  }
}
STRATA_LAUNCH_BOUNDS(k_flash_backward_dkv, kFlashThreads);
template <int D>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_flash_backward_dkv) void k_flash_backward_dkv(FlashBwd a) {
  flash_dkv_body<D>(a);
}
STRATA_LAUNCH_BOUNDS(k_flash_backward_dkv_bf16, kFlashThreads);
template <int D>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_flash_backward_dkv_bf16) void k_flash_backward_dkv_bf16(
    FlashBwdOf<ops::bf16> a) {
  flash_dkv_body<D>(a);
}

// ------------------------------------------------------------------ launchers
template <int D>
size_t flash_forward_smem() {
  return size_t(kFlashRows + 4 * kFlashKeys) * D * 2;
}
template <int D>
size_t flash_dq_smem() {
  return size_t(2 * kFlashRows + 4 * kFlashDqKeys<D>) * D * 2;
}
template <int D>
size_t flash_dkv_smem() {
  return size_t(2 * kFlashRows + 4 * kFlashDkvQueries<D>) * D * 2 +
         4 * kFlashDkvQueries<D> * sizeof(float);
}

inline dim3 flash_grid(int rows, int heads, int B) {
  return dim3(unsigned((rows + kFlashRows - 1) / kFlashRows), unsigned(heads), unsigned(B));
}

template <int D>
void flash_forward_d(void* stream, float* out, float* lse, const AttnView<float>& v) {
  const size_t smem = flash_forward_smem<D>();
  gpu::allow_dynamic_shared(k_flash_forward<D>, smem);
  STRATA_LAUNCH(k_flash_forward<D>, flash_grid(v.Tq, v.Hq, v.B), kFlashThreads, smem, stream, out,
                lse, v);
}
template <int D>
void flash_forward_d(void* stream, ops::bf16* out, float* lse, const AttnView<ops::bf16>& v) {
  const size_t smem = flash_forward_smem<D>();
  gpu::allow_dynamic_shared(k_flash_forward_bf16<D>, smem);
  STRATA_LAUNCH(k_flash_forward_bf16<D>, flash_grid(v.Tq, v.Hq, v.B), kFlashThreads, smem, stream,
                out, lse, v);
}
template <int D>
void flash_backward_d(void* stream, const FlashBwd& a) {
  gpu::allow_dynamic_shared(k_flash_backward_dq<D>, flash_dq_smem<D>());
  gpu::allow_dynamic_shared(k_flash_backward_dkv<D>, flash_dkv_smem<D>());
  STRATA_LAUNCH(k_flash_backward_dq<D>, flash_grid(a.T, a.Hq, a.B), kFlashThreads,
                flash_dq_smem<D>(), stream, a);
  STRATA_LAUNCH(k_flash_backward_dkv<D>, flash_grid(a.T, a.Hkv, a.B), kFlashThreads,
                flash_dkv_smem<D>(), stream, a);
}
template <int D>
void flash_backward_d(void* stream, const FlashBwdOf<ops::bf16>& a) {
  gpu::allow_dynamic_shared(k_flash_backward_dq_bf16<D>, flash_dq_smem<D>());
  gpu::allow_dynamic_shared(k_flash_backward_dkv_bf16<D>, flash_dkv_smem<D>());
  STRATA_LAUNCH(k_flash_backward_dq_bf16<D>, flash_grid(a.T, a.Hq, a.B), kFlashThreads,
                flash_dq_smem<D>(), stream, a);
  STRATA_LAUNCH(k_flash_backward_dkv_bf16<D>, flash_grid(a.T, a.Hkv, a.B), kFlashThreads,
                flash_dkv_smem<D>(), stream, a);
}

// Attention over the view (training: key_offset 0; a prefill over a cache:
// its position), out and lse as k_attention_forward's; E: float or
// ops::bf16. D must pass flash_head_dim.
template <typename E>
void flash_attention_forward(void* stream, E* out, float* lse, const AttnView<E>& v) {
  STRATA_CHECK(flash_head_dim(v.D), "flash attention: head_dim ", v.D, " is not 16/32/64/128");
  if (int64_t(v.B) * v.Tq * v.Hq == 0) return;
  switch (v.D) {
    case 16:
      return flash_forward_d<16>(stream, out, lse, v);
    case 32:
      return flash_forward_d<32>(stream, out, lse, v);
    case 64:
      return flash_forward_d<64>(stream, out, lse, v);
    default:
      return flash_forward_d<128>(stream, out, lse, v);
  }
}

// dq, dk, dv into dqkv from dout, qkv, the forward's lse and delta (rows of
// sum(dout * out), k_attention_delta).
template <typename E>
void flash_attention_backward(void* stream, const FlashBwdOf<E>& a, int D) {
  STRATA_CHECK(flash_head_dim(D), "flash attention: head_dim ", D, " is not 16/32/64/128");
  if (int64_t(a.B) * a.T * a.Hq == 0) return;
  switch (D) {
    case 16:
      return flash_backward_d<16>(stream, a);
    case 32:
      return flash_backward_d<32>(stream, a);
    case 64:
      return flash_backward_d<64>(stream, a);
    default:
      return flash_backward_d<128>(stream, a);
  }
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
