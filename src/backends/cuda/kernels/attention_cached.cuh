// Generation's attention kernels (ops.def): attention of new queries over a
// KV cache, appending keys and values to it, and decoding with the rows'
// positions and cache slots read from device memory (what lets a decode step
// replay as a CUDA graph); the cache stored as the activations are, or in
// bf16 beside fp32 ones. Kernels and launchers; the attention kernels they
// share are attention.cuh's.
#pragma once

#include "backends/cuda/kernels/attention.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// Generation: the forward kernel over a KV cache (no lse); a long prefill
// with bf16 matmuls on the flash kernel.
template <typename T>
void attention_cached_forward_fp(KernelContext<T>& k, T* out, const T* q, int64_t q_stride,
                                 const T* kc, const T* vc, int n, int pos0, int Hq, int Hkv, int D,
                                 int max_len) {
  check_heads(Hq, Hkv, D);
  if (n == 0) return;
  AttnView<T> v{q, kc, vc, q_stride, 0, D, int64_t(max_len) * D, 1, n, Hq, Hkv, D, pos0};
  // A prefill of at least a full tile on tensor cores; decode steps and
  // self-speculative verification (a few rows) keep the reference kernel,
  // which a 64-row tile would mostly waste.
  if constexpr (std::is_same_v<T, float>) {
    if (n >= kFlashRows && use_flash(k, D))
      return flash_attention_forward(k.stream(), out, nullptr, v);
  }
  STRATA_LAUNCH(k_attention_forward<T>, attn_blocks(int64_t(Hq) * n), kAttnThreads,
                kAttnWarps * (D + kWarp) * sizeof(T), k.stream(), out, static_cast<T*>(nullptr), v);
}

// The reference forward kernel over a cache (k_attention_forward, or its
// bf16-cache sibling), one query row a warp.
template <typename S, typename KS>
void launch_cached_rows(void* stream, S* out, const AttnView<S, KS>& v, int64_t rows) {
  const size_t smem = kAttnWarps * (v.D + kWarp) * sizeof(compute_t<S>);
  if constexpr (std::is_same_v<S, KS>)
    STRATA_LAUNCH(k_attention_forward<S>, attn_blocks(rows), kAttnThreads, smem, stream, out,
                  static_cast<compute_t<S>*>(nullptr), v);
  else
    STRATA_LAUNCH(k_attention_forward_kv16<S>, attn_blocks(rows), kAttnThreads, smem, stream, out,
                  static_cast<compute_t<S>*>(nullptr), v);
}

// Activations and cache in one storage: the flash kernel for a long prefill
// with bf16 matmuls (on bf16 as it is, or fp32), else the reference kernel; a
// bf16 cache beside fp32 activations: the reference kernel reading it.
template <typename T>
void attention_cached_forward(KernelContext<T>& k, ops::Act<T> out_, ops::ActIn<T> q_,
                              int64_t q_stride, ops::ActIn<T> kc_, ops::ActIn<T> vc_, int n,
                              int pos0, int Hq, int Hkv, int D, int max_len) {
  ops::with_cache_storage<T>(
      [&](auto s, auto ks) {
        using S = decltype(s);
        using KS = decltype(ks);
        if constexpr (std::is_same_v<S, T> && std::is_same_v<KS, T>) {
          attention_cached_forward_fp<T>(k, out_, q_, q_stride, kc_, vc_, n, pos0, Hq, Hkv, D,
                                         max_len);
        } else {
          check_heads(Hq, Hkv, D);
          if (n == 0) return;
          AttnView<S, KS> v{q_.template as<const S>(),
                            kc_.template as<const KS>(),
                            vc_.template as<const KS>(),
                            q_stride,
                            0,
                            D,
                            int64_t(max_len) * D,
                            1,
                            n,
                            Hq,
                            Hkv,
                            D,
                            pos0};
          if constexpr (std::is_same_v<S, KS> && std::is_same_v<S, ops::bf16>) {
            if (n >= kFlashRows && flash_on_bf16(k, D, ops::Dtype::BF16))
              return flash_attention_forward(k.stream(), out_.template as<S>(), nullptr, v);
          }
          launch_cached_rows(k.stream(), out_.template as<S>(), v, int64_t(Hq) * n);
        }
      },
      kc_, vc_, out_, q_);
}

// A thread per element of the appended keys and values (n rows of Hkv heads
// of D, a few thousand in decode): one launch for the whole span. The cache
// gets them in its storage (KS: S's, or bf16 rounded to nearest even).
template <typename S, typename KS>
STRATA_DEVICE void kv_append_elements(KS* kc, KS* vc, const S* qkv, int64_t q_stride, int n,
                                      int pos0, int Hq, int Hkv, int D, int max_len) {
  STRATA_GRID_LOOP(e, int64_t(n) * Hkv * D) {
    const int d = int(e % D), h = int(e / D % Hkv), i = int(e / (int64_t(D) * Hkv));
    const S* k = qkv + int64_t(i) * q_stride + int64_t(Hq + h) * D + d;
    const int64_t at = (int64_t(h) * max_len + pos0 + i) * D + d;
    kc[at] = act_store<KS>(act_load(k[0]));
    vc[at] = act_store<KS>(act_load(k[int64_t(Hkv) * D]));
  }
}
template <typename S>
STRATA_GLOBAL void k_kv_append(S* kc, S* vc, const S* qkv, int64_t q_stride, int n, int pos0,
                               int Hq, int Hkv, int D, int max_len) {
  kv_append_elements(kc, vc, qkv, q_stride, n, pos0, Hq, Hkv, D, max_len);
}
template <typename S>
STRATA_GLOBAL void k_kv_append_kv16(ops::bf16* kc, ops::bf16* vc, const S* qkv, int64_t q_stride,
                                    int n, int pos0, int Hq, int Hkv, int D, int max_len) {
  kv_append_elements(kc, vc, qkv, q_stride, n, pos0, Hq, Hkv, D, max_len);
}

template <typename T>
void kv_cache_append(KernelContext<T>& k, ops::Act<T> kc, ops::Act<T> vc, ops::ActIn<T> qkv,
                     int64_t q_stride, int n, int pos0, int Hq, int Hkv, int D, int max_len) {
  STRATA_CHECK(n >= 0 && pos0 >= 0 && pos0 + n <= max_len, "kv_cache_append: positions ", pos0,
               " .. ", pos0 + n - 1, " outside a cache of ", max_len);
  const int64_t total = int64_t(n) * Hkv * D;
  if (total == 0) return;
  ops::with_cache_storage<T>(
      [&](auto s, auto ks) {
        using S = decltype(s);
        using KS = decltype(ks);
        if constexpr (std::is_same_v<S, KS>)
          STRATA_LAUNCH(k_kv_append<S>, blocks_for(total, 256), 256, 0, k.stream(),
                        kc.template as<S>(), vc.template as<S>(), qkv.template as<const S>(),
                        q_stride, n, pos0, Hq, Hkv, D, max_len);
        else
          STRATA_LAUNCH(k_kv_append_kv16<S>, blocks_for(total, 256), 256, 0, k.stream(),
                        kc.template as<KS>(), vc.template as<KS>(), qkv.template as<const S>(),
                        q_stride, n, pos0, Hq, Hkv, D, max_len);
      },
      kc, vc, qkv);
}

// Decoding (ops.def: decode_rope_append): a thread per pair (i, i + D/2) of
// a head of a row; the rotation is rope_run's arithmetic, and the threads of
// key heads also store the rotated pair and the value pair into the cache.
template <typename S, typename KS>
STRATA_DEVICE void decode_rope_append_pairs(S* qkv, int64_t q_stride, const compute_t<S>* cos_t,
                                            const compute_t<S>* sin_t, KS* kc, KS* vc,
                                            int64_t cache_stride, int rows, const int32_t* slot,
                                            const int32_t* pos, int Hq, int Hkv, int D,
                                            int max_len) {
  using T = compute_t<S>;
  const int half = D / 2, H = Hq + Hkv;
  STRATA_GRID_LOOP(e, int64_t(rows) * H * half) {
    const int i = int(e % half), h = int(e / half % H), r = int(e / (int64_t(half) * H));
    const int p = pos[r];
    if (p < 0 || p >= max_len) continue;
    S* lo = qkv + int64_t(r) * q_stride + int64_t(h) * D + i;
    S* hi = lo + half;
    const int64_t tab = int64_t(p) * half + i;
    const T a = act_load(*lo), b = act_load(*hi), c = cos_t[tab], sj = T(1) * sin_t[tab];
    const S ra = act_store<S>(a * c - b * sj), rb = act_store<S>(b * c + a * sj);
    *lo = ra;
    *hi = rb;
    if (h >= Hq) {
      const int64_t at = int64_t(slot[r]) * cache_stride + (int64_t(h - Hq) * max_len + p) * D + i;
      const S* v = lo + int64_t(Hkv) * D;
      kc[at] = act_store<KS>(act_load(ra));
      kc[at + half] = act_store<KS>(act_load(rb));
      vc[at] = act_store<KS>(act_load(v[0]));
      vc[at + half] = act_store<KS>(act_load(v[half]));
    }
  }
}
template <typename S>
STRATA_GLOBAL void k_decode_rope_append(S* qkv, int64_t q_stride, const compute_t<S>* cos_t,
                                        const compute_t<S>* sin_t, S* kc, S* vc,
                                        int64_t cache_stride, int rows, const int32_t* slot,
                                        const int32_t* pos, int Hq, int Hkv, int D, int max_len) {
  decode_rope_append_pairs(qkv, q_stride, cos_t, sin_t, kc, vc, cache_stride, rows, slot, pos, Hq,
                           Hkv, D, max_len);
}
template <typename S>
STRATA_GLOBAL void k_decode_rope_append_kv16(S* qkv, int64_t q_stride, const compute_t<S>* cos_t,
                                             const compute_t<S>* sin_t, ops::bf16* kc,
                                             ops::bf16* vc, int64_t cache_stride, int rows,
                                             const int32_t* slot, const int32_t* pos, int Hq,
                                             int Hkv, int D, int max_len) {
  decode_rope_append_pairs(qkv, q_stride, cos_t, sin_t, kc, vc, cache_stride, rows, slot, pos, Hq,
                           Hkv, D, max_len);
}

template <typename T>
void decode_rope_append(KernelContext<T>& k, ops::Act<T> qkv, int64_t q_stride, const T* cos,
                        const T* sin, ops::Act<T> kc, ops::Act<T> vc, int64_t cache_stride,
                        int rows, const int32_t* slot, const int32_t* pos, int Hq, int Hkv, int D,
                        int max_len) {
  STRATA_CHECK(D % 2 == 0, "RoPE needs an even head dimension, got ", D);
  const int64_t total = int64_t(rows) * (Hq + Hkv) * (D / 2);
  if (total == 0) return;
  ops::with_cache_storage<T>(
      [&](auto s, auto ks) {
        using S = decltype(s);
        using KS = decltype(ks);
        if constexpr (std::is_same_v<S, KS>)
          STRATA_LAUNCH(k_decode_rope_append<S>, blocks_for(total, 256), 256, 0, k.stream(),
                        qkv.template as<S>(), q_stride, cos, sin, kc.template as<S>(),
                        vc.template as<S>(), cache_stride, rows, slot, pos, Hq, Hkv, D, max_len);
        else
          STRATA_LAUNCH(k_decode_rope_append_kv16<S>, blocks_for(total, 256), 256, 0, k.stream(),
                        qkv.template as<S>(), q_stride, cos, sin, kc.template as<KS>(),
                        vc.template as<KS>(), cache_stride, rows, slot, pos, Hq, Hkv, D, max_len);
      },
      kc, vc, qkv);
}

// One launch for every row: the reference kernel with a query a row and the
// rows' positions and cache blocks read from memory.
template <typename T>
void attention_decode(KernelContext<T>& k, ops::Act<T> out, ops::ActIn<T> q, int64_t q_stride,
                      ops::ActIn<T> kc, ops::ActIn<T> vc, int64_t cache_stride, int rows,
                      const int32_t* slot, const int32_t* pos, int Hq, int Hkv, int D,
                      int max_len) {
  check_heads(Hq, Hkv, D);
  if (int64_t(rows) * Hq == 0) return;
  ops::with_cache_storage<T>(
      [&](auto s, auto ks) {
        using S = decltype(s);
        using KS = decltype(ks);
        AttnView<S, KS> v{q.template as<const S>(),
                          kc.template as<const KS>(),
                          vc.template as<const KS>(),
                          q_stride,
                          cache_stride,
                          D,
                          int64_t(max_len) * D,
                          rows,
                          1,
                          Hq,
                          Hkv,
                          D,
                          0};
        v.key_pos = pos;
        v.kv_slot = slot;
        v.key_limit = max_len;
        launch_cached_rows(k.stream(), out.template as<S>(), v, int64_t(Hq) * rows);
      },
      kc, vc, out, q);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
