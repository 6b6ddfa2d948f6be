// Causal grouped-query attention, flash-style: no [T, T] matrix is ever
// stored. A warp owns one query row (forward, dq) or one key row (dk, dv);
// its lanes take 32 keys (queries) at a time, each computing a whole dot
// product, then share the probabilities through the warp's slice of shared
// memory to accumulate the output, whose D elements the lanes split (D <= 256).
// Online softmax in the forward; the backward recomputes probabilities from
// the saved log-sum-exp. Deterministic: no atomics, fixed summation order.
// Kernels on top, launchers (training, and generation over a KV cache) below.
#pragma once

#include <type_traits>

#include "backends/cuda/kernels/attention_view.cuh"
#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/flash_attention.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "core/error.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

constexpr int kAttnWarps = 4;     // warps (rows) per block
constexpr int kAttnMaxDLane = 8;  // D / 32 elements per lane: D <= 256
// Every attention kernel runs blocks of kAttnWarps warps and declares it as
// its launch bound: ptxas then knows no block is larger (unbounded, a block
// of 1024 threads would have to fit 64 registers a thread, and dkv uses 128),
// and a larger launch is refused, on a GPU and by the SIMT executor.
constexpr int kAttnThreads = kAttnWarps * kWarp;

// The kernels below are templates on the activations' storage S (T, or
// ops::bf16 for a float backend): they load with act_load, compute in
// T = compute_t<S> (shared memory included) and store with act_store<S>.
template <typename T>
STRATA_DEVICE T dot_row(const T* a, const T* b, int D) {
  T s = 0;
  for (int d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}
// The same over a row in compute type T and one in storage S.
template <typename T, typename A, typename B>
STRATA_DEVICE T dot_act(const A* a, const B* b, int D) {
  T s = 0;
  for (int d = 0; d < D; ++d) s += act_load(a[d]) * act_load(b[d]);
  return s;
}

// One 32-key chunk of the online softmax for a warp's query row: lane
// `lane` holds the score s of its key (valid: the key is visible), `v` the
// chunk's first value row (rows v_stride apart, `cnt` of them). Updates the
// running max m, sum l and the lane's output elements acc; `ps` is the warp's
// 32-slot shared scratch for the probabilities.
template <typename T, typename S>
STRATA_DEVICE void attn_online_chunk(T s, bool valid, int cnt, const S* v, int64_t v_stride, int D,
                                     int lane, T* ps, T& m, T& l, T* acc) {
  const T mn = g_max(m, warp_max(s));
  const T p = valid ? g_exp(s - mn) : T(0);
  const T alpha = g_exp(m - mn);
  l = l * alpha + warp_sum(p);
  ps[lane] = p;
  __syncwarp();
  for (int t = 0; t < kAttnMaxDLane; ++t) {
    const int d = lane + t * kWarp;
    if (d >= D) break;
    T o = acc[t] * alpha;
    for (int u = 0; u < cnt; ++u) o += ps[u] * act_load(v[int64_t(u) * v_stride + d]);
    acc[t] = o;
  }
  __syncwarp();  // every lane has read ps before the next chunk writes it
  m = mn;
}

// The end of a query row (b, i, h): out = acc / l over the lane's elements,
// lse = m + log(l) (lane 0; lse may be null).
template <typename T, typename S, typename KS>
STRATA_DEVICE void attn_finish_row(S* out, T* lse, const AttnView<S, KS>& a, int b, int i, int h,
                                   const T* acc, T m, T l, int lane) {
  S* orow = out + (int64_t(b) * a.Tq + i) * (int64_t(a.Hq) * a.D) + int64_t(h) * a.D;
  for (int t = 0; t < kAttnMaxDLane; ++t) {
    const int d = lane + t * kWarp;
    if (d < a.D) orow[d] = act_store<S>(acc[t] / l);
  }
  if (lse && lane == 0) lse[(int64_t(b) * a.Hq + h) * a.Tq + i] = m + g_log(l);
}

// out (b, i, h) rows Hq*D apart; lse [B, Hq, Tq] (may be null). A warp a
// query row; keys and values stored in KS (S's, or a bf16 KV cache).
template <typename S, typename KS>
STRATA_DEVICE void attention_forward_rows(S* out, compute_t<S>* lse, const AttnView<S, KS>& a) {
  using T = compute_t<S>;
  STRATA_DYNAMIC_SHARED(T, smem);
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int64_t row = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (row >= int64_t(a.B) * a.Hq * a.Tq) return;  // the whole warp leaves together
  const int i = int(row % a.Tq), h = int((row / a.Tq) % a.Hq),
            b = int(row / (int64_t(a.Tq) * a.Hq));
  const int g = h / (a.Hq / a.Hkv), D = a.D;
  int offset = a.key_offset, kv_b = b;
  if (a.key_pos) {  // decoding: the position and the cache block from memory
    offset = a.key_pos[b];
    kv_b = a.kv_slot[b];
    if (offset < 0 || offset >= a.key_limit) {
      S* orow = out + (int64_t(b) * a.Tq + i) * (int64_t(a.Hq) * D) + int64_t(h) * D;
      for (int d = lane; d < D; d += kWarp) orow[d] = act_store<S>(T(0));
      return;  // (the whole warp: one row)
    }
  }
  T* qs = smem + warp * (D + kWarp);
  T* ps = qs + D;
  const S* qrow = a.q + (int64_t(b) * a.Tq + i) * a.q_stride + int64_t(h) * D;
  for (int d = lane; d < D; d += kWarp) qs[d] = act_load(qrow[d]);
  __syncwarp();
  const T scale = T(1) / g_sqrt(T(D));
  const KS* kb = a.k + int64_t(kv_b) * a.kv_batch + int64_t(g) * a.kv_head;
  const KS* vb = a.v + int64_t(kv_b) * a.kv_batch + int64_t(g) * a.kv_head;
  const int nk = i + 1 + offset;
  T m = g_neg_inf<T>(), l = 0;
  T acc[kAttnMaxDLane];
  for (int t = 0; t < kAttnMaxDLane; ++t) acc[t] = 0;
  for (int c = 0; c < nk; c += kWarp) {
    const int j = c + lane;
    T s = g_neg_inf<T>();
    if (j < nk) s = dot_act<T>(qs, kb + int64_t(j) * a.kv_stride, D) * scale;
    attn_online_chunk(s, j < nk, g_min(kWarp, nk - c), vb + int64_t(c) * a.kv_stride, a.kv_stride,
                      D, lane, ps, m, l, acc);
  }
  attn_finish_row(out, lse, a, b, i, h, acc, m, l, lane);
}

STRATA_LAUNCH_BOUNDS(k_attention_forward, kAttnThreads);
template <typename S>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_attention_forward) void k_attention_forward(S* out,
                                                                             compute_t<S>* lse,
                                                                             AttnView<S> a) {
  attention_forward_rows(out, lse, a);
}
// Queries in S over a bf16 KV cache (generation with --kv-cache bf16).
STRATA_LAUNCH_BOUNDS(k_attention_forward_kv16, kAttnThreads);
template <typename S>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_attention_forward_kv16) void k_attention_forward_kv16(
    S* out, compute_t<S>* lse, AttnView<S, ops::bf16> a) {
  attention_forward_rows(out, lse, a);
}

// delta[b, h, i] = sum_d dout * out over the row (the softmax backward's
// row term).
STRATA_LAUNCH_BOUNDS(k_attention_delta, kAttnThreads);
template <typename S>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_attention_delta) void k_attention_delta(compute_t<S>* delta,
                                                                         const S* dout,
                                                                         const S* out, int B,
                                                                         int T_, int Hq, int D) {
  using T = compute_t<S>;
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int64_t row = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (row >= int64_t(B) * Hq * T_) return;
  const int i = int(row % T_), h = int((row / T_) % Hq), b = int(row / (int64_t(T_) * Hq));
  const int64_t o = (int64_t(b) * T_ + i) * (int64_t(Hq) * D) + int64_t(h) * D;
  T s = 0;
  for (int d = lane; d < D; d += kWarp) s += act_load(dout[o + d]) * act_load(out[o + d]);
  s = warp_sum(s);
  if (lane == 0) delta[(int64_t(b) * Hq + h) * T_ + i] = s;
}

// dq of query row (b, i, h), written into dqkv (layout of qkv).
STRATA_LAUNCH_BOUNDS(k_attention_backward_dq, kAttnThreads);
template <typename S>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_attention_backward_dq) void k_attention_backward_dq(
    S* dqkv, const S* dout, const S* qkv, const compute_t<S>* lse, const compute_t<S>* delta, int B,
    int T_, int Hq, int Hkv, int D) {
  using T = compute_t<S>;
  STRATA_DYNAMIC_SHARED(T, smem);
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int64_t row = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (row >= int64_t(B) * Hq * T_) return;
  const int i = int(row % T_), h = int((row / T_) % Hq), b = int(row / (int64_t(T_) * Hq));
  const int g = h / (Hq / Hkv);
  const int64_t W = int64_t(Hq + 2 * Hkv) * D;
  T* qs = smem + warp * (2 * D + kWarp);
  T* dos = qs + D;
  T* ds_s = dos + D;
  const S* qrow = qkv + (int64_t(b) * T_ + i) * W + int64_t(h) * D;
  const S* dorow = dout + (int64_t(b) * T_ + i) * (int64_t(Hq) * D) + int64_t(h) * D;
  for (int d = lane; d < D; d += kWarp) {
    qs[d] = act_load(qrow[d]);
    dos[d] = act_load(dorow[d]);
  }
  __syncwarp();
  const T scale = T(1) / g_sqrt(T(D));
  const int64_t lrow = (int64_t(b) * Hq + h) * T_ + i;
  const T li = lse[lrow], di = delta[lrow];
  const S* kb = qkv + int64_t(b) * T_ * W + int64_t(Hq + g) * D;
  const S* vb = qkv + int64_t(b) * T_ * W + int64_t(Hq + Hkv + g) * D;
  T acc[kAttnMaxDLane];
  for (int t = 0; t < kAttnMaxDLane; ++t) acc[t] = 0;
  for (int c = 0; c <= i; c += kWarp) {
    const int j = c + lane;
    T ds = 0;
    if (j <= i) {
      const T p = g_exp(dot_act<T>(qs, kb + int64_t(j) * W, D) * scale - li);
      ds = p * (dot_act<T>(dos, vb + int64_t(j) * W, D) - di);
    }
    ds_s[lane] = ds;
    __syncwarp();
    const int cnt = g_min(kWarp, i + 1 - c);
    for (int t = 0; t < kAttnMaxDLane; ++t) {
      const int d = lane + t * kWarp;
      if (d >= D) break;
      T o = acc[t];
      for (int u = 0; u < cnt; ++u) o += ds_s[u] * act_load(kb[int64_t(c + u) * W + d]);
      acc[t] = o;
    }
    __syncwarp();
  }
  S* dq = dqkv + (int64_t(b) * T_ + i) * W + int64_t(h) * D;
  for (int t = 0; t < kAttnMaxDLane; ++t) {
    const int d = lane + t * kWarp;
    if (d < D) dq[d] = act_store<S>(acc[t] * scale);
  }
}

// dk and dv of key row (b, j, g): sums over the query heads of group g and
// the queries i >= j.
STRATA_LAUNCH_BOUNDS(k_attention_backward_dkv, kAttnThreads);
template <typename S>
STRATA_GLOBAL STRATA_BOUNDS_OF(k_attention_backward_dkv) void k_attention_backward_dkv(
    S* dqkv, const S* dout, const S* qkv, const compute_t<S>* lse, const compute_t<S>* delta, int B,
    int T_, int Hq, int Hkv, int D) {
  using T = compute_t<S>;
  STRATA_DYNAMIC_SHARED(T, smem);
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int64_t row = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (row >= int64_t(B) * Hkv * T_) return;
  const int j = int(row % T_), g = int((row / T_) % Hkv), b = int(row / (int64_t(T_) * Hkv));
  const int rep = Hq / Hkv;
  const int64_t W = int64_t(Hq + 2 * Hkv) * D;
  T* ks = smem + warp * (2 * D + 2 * kWarp);
  T* vs = ks + D;
  T* p_s = vs + D;
  T* ds_s = p_s + kWarp;
  const S* base = qkv + int64_t(b) * T_ * W;
  for (int d = lane; d < D; d += kWarp) {
    ks[d] = act_load(base[int64_t(j) * W + int64_t(Hq + g) * D + d]);
    vs[d] = act_load(base[int64_t(j) * W + int64_t(Hq + Hkv + g) * D + d]);
  }
  __syncwarp();
  const T scale = T(1) / g_sqrt(T(D));
  T dk[kAttnMaxDLane], dv[kAttnMaxDLane];
  for (int t = 0; t < kAttnMaxDLane; ++t) dk[t] = dv[t] = 0;
  for (int h = g * rep; h < (g + 1) * rep; ++h) {
    const S* qb = base + int64_t(h) * D;
    const S* dob = dout + int64_t(b) * T_ * (int64_t(Hq) * D) + int64_t(h) * D;
    const int64_t lb = (int64_t(b) * Hq + h) * T_;
    for (int c = j; c < T_; c += kWarp) {
      const int i = c + lane;
      T p = 0, ds = 0;
      if (i < T_) {
        p = g_exp(dot_act<T>(qb + int64_t(i) * W, ks, D) * scale - lse[lb + i]);
        ds = p * (dot_act<T>(dob + int64_t(i) * Hq * D, vs, D) - delta[lb + i]);
      }
      p_s[lane] = p;
      ds_s[lane] = ds;
      __syncwarp();
      const int cnt = g_min(kWarp, T_ - c);
      for (int t = 0; t < kAttnMaxDLane; ++t) {
        const int d = lane + t * kWarp;
        if (d >= D) break;
        T a = dv[t], e = dk[t];
        for (int u = 0; u < cnt; ++u) {
          a += p_s[u] * act_load(dob[int64_t(c + u) * Hq * D + d]);
          e += ds_s[u] * act_load(qb[int64_t(c + u) * W + d]);
        }
        dv[t] = a;
        dk[t] = e;
      }
      __syncwarp();
    }
  }
  S* dkrow = dqkv + (int64_t(b) * T_ + j) * W + int64_t(Hq + g) * D;
  S* dvrow = dkrow + int64_t(Hkv) * D;
  for (int t = 0; t < kAttnMaxDLane; ++t) {
    const int d = lane + t * kWarp;
    if (d >= D) break;
    dkrow[d] = act_store<S>(dk[t] * scale);
    dvrow[d] = act_store<S>(dv[t]);
  }
}

// ------------------------------------------------------------------ launchers

inline unsigned attn_blocks(int64_t rows) { return unsigned((rows + kAttnWarps - 1) / kAttnWarps); }

inline void check_heads(int Hq, int Hkv, int D) {
  STRATA_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: ", Hq, " query heads do not group over ", Hkv,
               " key/value heads");
  STRATA_CHECK(D <= kAttnMaxDLane * kWarp,
               "attention kernels take head_dim <= ", kAttnMaxDLane * kWarp, ", got ", D);
}

// Training attention runs on tensor cores (flash_attention.cuh) when the
// matmuls are bf16 and the head dimension is one it was built for; fp32 (and
// double) runs the reference kernels above.
template <typename T>
bool use_flash(KernelContext<T>& k, int D) {
  if constexpr (std::is_same_v<T, float>)
    return k.gemm().precision() == ops::MatmulPrecision::BF16 && flash_head_dim(D);
  else
    return false;
}

// A library's attention (model.attention = "cudnn": ExternalAttention) runs
// on bf16 copies in the same layouts; its results come back to fp32.
template <typename T>
uint16_t* bf16_copy(KernelContext<T>& k, Slot slot, const float* src, int64_t n) {
  auto* dst = static_cast<uint16_t*>(k.scratch(slot, size_t(n) * 2));
  if (n) STRATA_LAUNCH(k_to_bf16<float>, blocks_for(n, 256), 256, 0, k.stream(), dst, src, n);
  return dst;
}

template <typename T>
void external_attention_forward(KernelContext<T>& k, ExternalAttention& x, T* out, T* lse,
                                const T* qkv, const AttentionShape& s) {
  if constexpr (!std::is_same_v<T, float>) {
    fail(cat(x.name(), " runs float models only"));
  } else {
    STRATA_CHECK(k.gemm().precision() == ops::MatmulPrecision::BF16,
                 "model.attention = \"cudnn\" needs bf16 matmuls (training.precision = \"bf16\")");
    const int64_t nq = int64_t(s.B) * s.T * (s.Hq + 2 * s.Hkv) * s.D,
                  no = int64_t(s.B) * s.T * s.Hq * s.D;
    const uint16_t* q16 = bf16_copy(k, kAttnQkv16, qkv, nq);
    auto* o16 = static_cast<uint16_t*>(k.scratch(kAttnOut16, size_t(no) * 2));
    float* stats = lse ? lse : static_cast<float*>(k.scratch(kLse, size_t(s.B) * s.Hq * s.T * 4));
    x.forward(k.stream(), o16, stats, q16, s, k.scratch(kAttnWork, x.forward_workspace(s)));
    STRATA_LAUNCH(k_from_bf16<float>, blocks_for(no, 256), 256, 0, k.stream(), out,
                  static_cast<const uint16_t*>(o16), no);
  }
}

template <typename T>
void external_attention_backward(KernelContext<T>& k, ExternalAttention& x, T* dqkv, const T* dout,
                                 const T* qkv, const T* out, const T* lse,
                                 const AttentionShape& s) {
  if constexpr (!std::is_same_v<T, float>) {
    fail(cat(x.name(), " runs float models only"));
  } else {
    const int64_t nq = int64_t(s.B) * s.T * (s.Hq + 2 * s.Hkv) * s.D,
                  no = int64_t(s.B) * s.T * s.Hq * s.D;
    const uint16_t* q16 = bf16_copy(k, kAttnQkv16, qkv, nq);
    const uint16_t* o16 = bf16_copy(k, kAttnOut16, out, no);
    const uint16_t* d16 = bf16_copy(k, kAttnDout16, dout, no);
    auto* g16 = static_cast<uint16_t*>(k.scratch(kAttnGrad16, size_t(nq) * 2));
    x.backward(k.stream(), g16, d16, q16, o16, lse, s,
               k.scratch(kAttnWork, x.backward_workspace(s)));
    STRATA_LAUNCH(k_from_bf16<float>, blocks_for(nq, 256), 256, 0, k.stream(), dqkv,
                  static_cast<const uint16_t*>(g16), nq);
  }
}

// The view of q, k and v in qkv rows (W = (Hq + 2 Hkv) D apart).
template <typename E>
AttnView<E> qkv_view(const E* qkv, int B, int T_, int Hq, int Hkv, int D) {
  const int64_t W = int64_t(Hq + 2 * Hkv) * D;
  return AttnView<E>{qkv,
                     qkv + int64_t(Hq) * D,
                     qkv + int64_t(Hq + Hkv) * D,
                     W,
                     int64_t(T_) * W,
                     W,
                     D,
                     B,
                     T_,
                     Hq,
                     Hkv,
                     D,
                     0};
}

template <typename T>
void attention_forward_fp(KernelContext<T>& k, T* out, T* lse, const T* qkv, int B, int T_, int Hq,
                          int Hkv, int D) {
  check_heads(Hq, Hkv, D);
  if (int64_t(B) * T_ * Hq == 0) return;
  if (ExternalAttention* x = k.external_attention())
    return external_attention_forward(k, *x, out, lse, qkv, AttentionShape{B, T_, Hq, Hkv, D});
  const AttnView<T> v = qkv_view(qkv, B, T_, Hq, Hkv, D);
  const int64_t rows = int64_t(B) * Hq * T_;
  if (rows == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (use_flash(k, D)) return flash_attention_forward(k.stream(), out, lse, v);
  }
  STRATA_LAUNCH(k_attention_forward<T>, attn_blocks(rows), kAttnThreads,
                kAttnWarps * (D + kWarp) * sizeof(T), k.stream(), out, lse, v);
}

template <typename T>
void attention_backward_fp(KernelContext<T>& k, T* dqkv, const T* dout, const T* qkv, const T* out,
                           const T* lse, int B, int T_, int Hq, int Hkv, int D) {
  check_heads(Hq, Hkv, D);
  const int64_t rows = int64_t(B) * Hq * T_;
  if (rows == 0) return;
  if (ExternalAttention* x = k.external_attention())
    return external_attention_backward(k, *x, dqkv, dout, qkv, out, lse,
                                       AttentionShape{B, T_, Hq, Hkv, D});
  T* delta = static_cast<T*>(k.scratch(kDelta, size_t(rows) * sizeof(T)));
  STRATA_LAUNCH(k_attention_delta<T>, attn_blocks(rows), kAttnThreads, 0, k.stream(), delta, dout,
                out, B, T_, Hq, D);
  if constexpr (std::is_same_v<T, float>) {
    if (use_flash(k, D))
      return flash_attention_backward(k.stream(),
                                      FlashBwd{dqkv, dout, qkv, lse, delta, B, T_, Hq, Hkv}, D);
  }
  STRATA_LAUNCH(k_attention_backward_dq<T>, attn_blocks(rows), kAttnThreads,
                kAttnWarps * (2 * D + kWarp) * sizeof(T), k.stream(), dqkv, dout, qkv, lse,
                static_cast<const T*>(delta), B, T_, Hq, Hkv, D);
  STRATA_LAUNCH(k_attention_backward_dkv<T>, attn_blocks(int64_t(B) * Hkv * T_), kAttnThreads,
                kAttnWarps * (2 * D + 2 * kWarp) * sizeof(T), k.stream(), dqkv, dout, qkv, lse,
                static_cast<const T*>(delta), B, T_, Hq, Hkv, D);
}

// The launchers: bf16 activations go to the flash kernels, a library's
// attention or the reference kernels as they are (no staging).
// bf16 activations on the flash kernels, which read and write them as they
// are: strata's attention with bf16 matmuls and a built head dimension. (A
// library's attention, ExternalAttention, takes bf16 in strata's layouts:
// bf16 activations go to it as they are, fp32 ones through bf16 copies.)
template <typename T>
bool flash_on_bf16(KernelContext<T>& k, int D, const ops::Dtype storage) {
  return storage == ops::Dtype::BF16 && !k.external_attention() && use_flash(k, D);
}

template <typename T>
void attention_forward(KernelContext<T>& k, ops::Act<T> out_, T* lse, ops::ActIn<T> qkv_, int B,
                       int T_, int Hq, int Hkv, int D) {
  if constexpr (std::is_same_v<T, float>) {
    const ops::Dtype storage = ops::common_storage(ops::Dtype::F32, out_, qkv_);
    ExternalAttention* x = k.external_attention();
    if (x && storage == ops::Dtype::BF16 && int64_t(B) * T_ * Hq > 0) {  // the library's layouts
      check_heads(Hq, Hkv, D);
      STRATA_CHECK(
          k.gemm().precision() == ops::MatmulPrecision::BF16,
          "model.attention = \"cudnn\" needs bf16 matmuls (training.precision = \"bf16\")");
      const AttentionShape sh{B, T_, Hq, Hkv, D};
      float* stats = lse ? lse : static_cast<float*>(k.scratch(kLse, size_t(B) * Hq * T_ * 4));
      return x->forward(k.stream(), static_cast<uint16_t*>(out_.raw()), stats,
                        static_cast<const uint16_t*>(qkv_.raw()), sh,
                        k.scratch(kAttnWork, x->forward_workspace(sh)));
    }
    if (storage == ops::Dtype::BF16) {  // the flash or the reference kernels, on bf16 as it is
      using E = ops::bf16;
      check_heads(Hq, Hkv, D);
      const AttnView<E> v = qkv_view(qkv_.template as<const E>(), B, T_, Hq, Hkv, D);
      if (flash_on_bf16(k, D, storage))
        return flash_attention_forward(k.stream(), out_.template as<E>(), lse, v);
      const int64_t rows = int64_t(B) * Hq * T_;
      if (rows == 0) return;
      STRATA_LAUNCH(k_attention_forward<E>, attn_blocks(rows), kAttnThreads,
                    kAttnWarps * (D + kWarp) * sizeof(float), k.stream(), out_.template as<E>(),
                    lse, v);
      return;
    }
  }
  attention_forward_fp<T>(k, out_, lse, qkv_, B, T_, Hq, Hkv, D);
}

template <typename T>
void attention_backward(KernelContext<T>& k, ops::Act<T> dqkv_, ops::ActIn<T> dout_,
                        ops::ActIn<T> qkv_, ops::ActIn<T> out_, const T* lse, int B, int T_, int Hq,
                        int Hkv, int D) {
  if constexpr (std::is_same_v<T, float>) {
    const ops::Dtype storage = ops::common_storage(ops::Dtype::F32, dqkv_, dout_, qkv_, out_);
    ExternalAttention* x = k.external_attention();
    if (x && storage == ops::Dtype::BF16 && int64_t(B) * T_ * Hq > 0) {  // the library's layouts
      check_heads(Hq, Hkv, D);
      const AttentionShape sh{B, T_, Hq, Hkv, D};
      return x->backward(k.stream(), static_cast<uint16_t*>(dqkv_.raw()),
                         static_cast<const uint16_t*>(dout_.raw()),
                         static_cast<const uint16_t*>(qkv_.raw()),
                         static_cast<const uint16_t*>(out_.raw()), lse, sh,
                         k.scratch(kAttnWork, x->backward_workspace(sh)));
    }
    if (storage == ops::Dtype::BF16) {  // the flash or the reference kernels, on bf16 as it is
      check_heads(Hq, Hkv, D);
      const int64_t rows = int64_t(B) * Hq * T_;
      if (rows == 0) return;
      using E = ops::bf16;
      auto* delta = static_cast<float*>(k.scratch(kDelta, size_t(rows) * sizeof(float)));
      E* dqkv = dqkv_.template as<E>();
      const E* dout = dout_.template as<const E>();
      const E* qkv = qkv_.template as<const E>();
      STRATA_LAUNCH(k_attention_delta<E>, attn_blocks(rows), kAttnThreads, 0, k.stream(), delta,
                    dout, out_.template as<const E>(), B, T_, Hq, D);
      if (flash_on_bf16(k, D, storage))
        return flash_attention_backward(
            k.stream(), FlashBwdOf<E>{dqkv, dout, qkv, lse, delta, B, T_, Hq, Hkv}, D);
      const float* cdelta = delta;
      STRATA_LAUNCH(k_attention_backward_dq<E>, attn_blocks(rows), kAttnThreads,
                    kAttnWarps * (2 * D + kWarp) * sizeof(float), k.stream(), dqkv, dout, qkv, lse,
                    cdelta, B, T_, Hq, Hkv, D);
      STRATA_LAUNCH(k_attention_backward_dkv<E>, attn_blocks(int64_t(B) * Hkv * T_), kAttnThreads,
                    kAttnWarps * (2 * D + 2 * kWarp) * sizeof(float), k.stream(), dqkv, dout, qkv,
                    lse, cdelta, B, T_, Hq, Hkv, D);
      return;
    }
  }
  attention_backward_fp<T>(k, dqkv_, dout_, qkv_, out_, lse, B, T_, Hq, Hkv, D);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
