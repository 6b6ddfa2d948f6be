// Kernel lab variants: numbered alternatives to the production kernels of
// src/backends/cuda/kernels/, each validated against the CPU backend and
// timed by kernel_lab.cpp. Variant 1 of each op is the production kernel; add
// the next idea as variant N+1 here and register it in kernel_lab.cpp.
#pragma once

#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/bias.cuh"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/rmsnorm.cuh"

namespace strata::lab {

using namespace strata::cuda;

// RMSNorm forward v2: one warp per row, shuffles only (no shared memory, no
// block barrier), four rows per block of 128 threads.
template <typename T>
STRATA_GLOBAL void rmsnorm_v2(T* out, T* rstd, const T* x, const T* w, int64_t N, int C, T eps) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (n >= N) return;
  const T* xr = x + n * C;
  T ss = 0;
  for (int c = lane; c < C; c += kWarp) ss += xr[c] * xr[c];
  ss = warp_sum(ss);
  const T r = T(1) / g_sqrt(ss / T(C) + eps);
  if (lane == 0) rstd[n] = r;
  for (int c = lane; c < C; c += kWarp) out[n * C + c] = xr[c] * r * w[c];
}

// Column sums v2 (bias / norm-weight gradients): a thread per column over
// all rows, in order. The baseline the production kernels (row chunks, then
// the partials in order: reduce.cuh) replaced.
template <typename T>
STRATA_GLOBAL void column_sums_v2(T* dst, const T* src, int64_t N, int OC) {
  const int j = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= OC) return;
  T s = 0;
  for (int64_t r = 0; r < N; ++r) s += src[r * OC + j];
  dst[j] += s;
}

// Attention forward v2: a warp per query row whose lanes split the head
// dimension; one dot product (a warp reduction) per key. The naive baseline
// the production kernel (lanes over keys, shared probabilities) replaced.
STRATA_LAUNCH_BOUNDS(attention_v2, kAttnThreads);
template <typename T>
STRATA_GLOBAL STRATA_BOUNDS_OF(attention_v2) void attention_v2(T* out, T* lse, AttnView<T> a) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int64_t row = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (row >= int64_t(a.B) * a.Hq * a.Tq) return;
  const int i = int(row % a.Tq), h = int((row / a.Tq) % a.Hq),
            b = int(row / (int64_t(a.Tq) * a.Hq));
  const int g = h / (a.Hq / a.Hkv), D = a.D;
  const T* q = a.q + (int64_t(b) * a.Tq + i) * a.q_stride + int64_t(h) * D;
  const T* kb = a.k + int64_t(b) * a.kv_batch + int64_t(g) * a.kv_head;
  const T* vb = a.v + int64_t(b) * a.kv_batch + int64_t(g) * a.kv_head;
  const T scale = T(1) / g_sqrt(T(D));
  T m = g_neg_inf<T>(), l = 0, acc[kAttnMaxDLane];
  for (int t = 0; t < kAttnMaxDLane; ++t) acc[t] = 0;
  const int nk = i + 1 + a.key_offset;
  for (int j = 0; j < nk; ++j) {
    T part = 0;
    for (int d = lane; d < D; d += kWarp) part += q[d] * kb[int64_t(j) * a.kv_stride + d];
    const T s = warp_sum(part) * scale;
    const T mn = g_max(m, s), alpha = g_exp(m - mn), p = g_exp(s - mn);
    l = l * alpha + p;
    for (int t = 0; t < kAttnMaxDLane; ++t) {
      const int d = lane + t * kWarp;
      if (d < D) acc[t] = acc[t] * alpha + p * vb[int64_t(j) * a.kv_stride + d];
    }
    m = mn;
  }
  attn_finish_row(out, lse, a, b, i, h, acc, m, l, lane);
}

// Attention forward v3: variant 1 with the keys and values shared by the
// block. A 2-D grid puts the four warps of a block on four consecutive query
// rows of one (b, h), which read the same keys: each 32-key chunk of K and V
// is staged in shared memory once per block (coalesced, rows padded by one
// element against bank conflicts) instead of once per warp. Block barriers
// around each chunk; warps past their causal limit mask their lanes but keep
// taking part in the barriers. Its shared memory, 2 * 32 * (D + 1) + 4 *
// (D + 32) elements, passes 48 KiB from D = 178 in fp32 (D = 88 in double),
// so the lab opts in (gpu::allow_dynamic_shared) before launching it.
STRATA_LAUNCH_BOUNDS(attention_v3, kAttnThreads);
template <typename T>
STRATA_GLOBAL STRATA_BOUNDS_OF(attention_v3) void attention_v3(T* out, T* lse, AttnView<T> a) {
  STRATA_DYNAMIC_SHARED(T, smem);
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int bh = int(blockIdx.y), h = bh % a.Hq, b = bh / a.Hq;
  const int i = int(blockIdx.x) * kAttnWarps + warp;  // this warp's query row
  const bool active = i < a.Tq;
  const int g = h / (a.Hq / a.Hkv), D = a.D, P = D + 1;
  T* ks = smem;            // [32][D + 1]
  T* vs = ks + kWarp * P;  // [32][D + 1]
  T* qs = vs + kWarp * P + warp * (D + kWarp);
  T* ps = qs + D;
  const T* qrow = a.q + (int64_t(b) * a.Tq + (active ? i : 0)) * a.q_stride + int64_t(h) * D;
  for (int d = lane; d < D; d += kWarp) qs[d] = qrow[d];
  const T* kb = a.k + int64_t(b) * a.kv_batch + int64_t(g) * a.kv_head;
  const T* vb = a.v + int64_t(b) * a.kv_batch + int64_t(g) * a.kv_head;
  const T scale = T(1) / g_sqrt(T(D));
  const int nk = (active ? i : 0) + 1 + a.key_offset;
  // The block's last row sees the most keys.
  const int last = g_min(a.Tq - 1, int(blockIdx.x) * kAttnWarps + kAttnWarps - 1);
  const int nk_block = last + 1 + a.key_offset;
  T m = g_neg_inf<T>(), l = 0, acc[kAttnMaxDLane];
  for (int t = 0; t < kAttnMaxDLane; ++t) acc[t] = 0;
  for (int c = 0; c < nk_block; c += kWarp) {
    const int cnt_block = g_min(kWarp, nk_block - c);
    __syncthreads();  // the previous chunk is no longer read
    for (int e = int(threadIdx.x); e < cnt_block * D; e += int(blockDim.x)) {
      const int r = e / D, d = e % D;
      ks[r * P + d] = kb[int64_t(c + r) * a.kv_stride + d];
      vs[r * P + d] = vb[int64_t(c + r) * a.kv_stride + d];
    }
    __syncthreads();
    if (c >= nk) continue;  // this row's keys ended (uniform over the warp)
    const int j = c + lane;
    T s = g_neg_inf<T>();
    if (j < nk) s = dot_row(qs, ks + lane * P, D) * scale;
    attn_online_chunk(s, j < nk, g_min(kWarp, nk - c), vs, int64_t(P), D, lane, ps, m, l, acc);
  }
  if (!active) return;
  attn_finish_row(out, lse, a, b, i, h, acc, m, l, lane);
}

}  // namespace strata::lab
