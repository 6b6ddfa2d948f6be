// Attention of new queries over a KV cache, and appending to it (generation).
// Inference only: no backward (nothing is trained through the cache).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"

namespace strata::cpu {

namespace {

// KS: the cache's storage (S's, or bf16 beside fp32 activations).
template <typename T, typename S, typename KS>
void cached(S* out, const S* q, int64_t q_stride, const KS* kc, const KS* vc, int n, int pos0,
            int Hq, int Hkv, int D, int max_len) {
  const int group = Hq / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  const int64_t work = int64_t(n) * Hq;
#pragma omp parallel
  {
    std::vector<double> s(static_cast<size_t>(pos0 + n));
    std::vector<double> acc(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t w = 0; w < work; ++w) {
      const int i = int(w / Hq), h = int(w % Hq), kvh = h / group;
      const S* qi = q + int64_t(i) * q_stride + int64_t(h) * D;
      const KS* K = kc + int64_t(kvh) * max_len * D;
      const KS* V = vc + int64_t(kvh) * max_len * D;
      const int len = pos0 + i + 1;  // causal: positions 0 .. pos0 + i
      double m = -INFINITY;
      for (int j = 0; j < len; ++j) {
        const KS* kj = K + int64_t(j) * D;
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < D; ++d) dot += T(qi[d]) * T(kj[d]);
        s[size_t(j)] = double(dot) * scale;
        m = std::max(m, s[size_t(j)]);
      }
      double z = 0;
      for (int j = 0; j < len; ++j) z += (s[size_t(j)] = std::exp(s[size_t(j)] - m));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < len; ++j) {
        const KS* vj = V + int64_t(j) * D;
        const double p = s[size_t(j)];
        for (int d = 0; d < D; ++d) acc[size_t(d)] += p * double(T(vj[d]));
      }
      S* o = out + int64_t(i) * Hq * D + int64_t(h) * D;
      for (int d = 0; d < D; ++d) o[d] = S(T(acc[size_t(d)] / z));
    }
  }
}

}  // namespace

template <typename T>
void attention_cached_forward(Act<T> out, ActIn<T> q, int64_t q_stride, ActIn<T> kc, ActIn<T> vc,
                              int n, int pos0, int Hq, int Hkv, int D, int max_len) {
  ops::with_cache_storage<T>(
      [&](auto s, auto ks) {
        using S = decltype(s);
        using KS = decltype(ks);
        cached<T>(out.template as<S>(), q.template as<const S>(), q_stride,
                  kc.template as<const KS>(), vc.template as<const KS>(), n, pos0, Hq, Hkv, D,
                  max_len);
      },
      kc, vc, out, q);
}

STRATA_CPU_INSTANTIATE(attention_cached_forward)

template <typename T>
void kv_cache_append(Act<T> kc, Act<T> vc, ActIn<T> qkv, int64_t q_stride, int n, int pos0, int Hq,
                     int Hkv, int D, int max_len) {
  STRATA_CHECK(n >= 0 && pos0 >= 0 && pos0 + n <= max_len, "kv_cache_append: positions ", pos0,
               " .. ", pos0 + n - 1, " outside a cache of ", max_len);
  ops::with_cache_storage<T>(
      [&](auto s, auto ks) {
        using S = decltype(s);
        using KS = decltype(ks);
        KS* K = kc.template as<KS>();
        KS* V = vc.template as<KS>();
        const S* rows = qkv.template as<const S>();
        // (to the cache's storage: exact, or rounded to bf16 to nearest even)
        const auto put = [](const S* from, KS* to, int count) {
          for (int d = 0; d < count; ++d) to[d] = KS(T(from[d]));
        };
        for (int i = 0; i < n; ++i)
          for (int h = 0; h < Hkv; ++h) {
            const S* k = rows + int64_t(i) * q_stride + int64_t(Hq + h) * D;
            const int64_t at = (int64_t(h) * max_len + pos0 + i) * D;
            put(k, K + at, D);
            put(k + int64_t(Hkv) * D, V + at, D);
          }
      },
      kc, vc, qkv);
}

STRATA_CPU_INSTANTIATE(kv_cache_append)

// Decoding with positions and slots in (host) backend memory: row by row,
// the ops above at pos0 = pos[r] (the same numbers as the span path).
template <typename T>
void decode_rope_append(Act<T> qkv, int64_t q_stride, const T* cos, const T* sin, Act<T> kc,
                        Act<T> vc, int64_t cache_stride, int rows, const int32_t* slot,
                        const int32_t* pos, int Hq, int Hkv, int D, int max_len) {
  for (int r = 0; r < rows; ++r) {
    const int p = pos[r];
    if (p < 0 || p >= max_len) continue;
    const Act<T> row = qkv + int64_t(r) * q_stride;
    rope_forward<T>(row, cos, sin, 1, 1, Hq + Hkv, D, q_stride, p);
    const int64_t at = int64_t(slot[r]) * cache_stride;
    kv_cache_append<T>(kc + at, vc + at, row, q_stride, 1, p, Hq, Hkv, D, max_len);
  }
}

STRATA_CPU_INSTANTIATE(decode_rope_append)

template <typename T>
void attention_decode(Act<T> out, ActIn<T> q, int64_t q_stride, ActIn<T> kc, ActIn<T> vc,
                      int64_t cache_stride, int rows, const int32_t* slot, const int32_t* pos,
                      int Hq, int Hkv, int D, int max_len) {
  const int64_t width = int64_t(Hq) * D;
  for (int r = 0; r < rows; ++r) {
    const int p = pos[r];
    const Act<T> o = out + int64_t(r) * width;
    if (p < 0 || p >= max_len) {
      with_storage<T>(
          [&](auto s) { std::fill_n(o.template as<decltype(s)>(), width, decltype(s){}); }, o);
      continue;
    }
    const int64_t at = int64_t(slot[r]) * cache_stride;
    attention_cached_forward<T>(o, q + int64_t(r) * q_stride, q_stride, kc + at, vc + at, 1, p, Hq,
                                Hkv, D, max_len);
  }
}

STRATA_CPU_INSTANTIATE(attention_decode)

}  // namespace strata::cpu
