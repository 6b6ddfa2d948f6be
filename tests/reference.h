// Plain, obviously-correct reference implementations in double precision,
// written from the definitions (Hugging Face / PyTorch semantics) and sharing
// no code with the kernels they check.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata::reference {

using Vec = std::vector<double>;

// Rows of wte by token id. With a vocabulary shard (V_local >= 0) wte holds
// rows [v0, v0 + V_local): other tokens give zero rows.
inline Vec embedding(const std::vector<int32_t>& tokens, const Vec& wte, int C, int64_t v0 = 0,
                     int V_local = -1) {
  Vec out(tokens.size() * C, 0.0);
  for (size_t n = 0; n < tokens.size(); ++n) {
    const int64_t row = tokens[n] - v0;
    if (V_local >= 0 && (row < 0 || row >= V_local)) continue;
    for (int c = 0; c < C; ++c) out[n * C + c] = wte[size_t(row) * C + c];
  }
  return out;
}

inline Vec rmsnorm(const Vec& x, const Vec& w, int64_t N, int C, double eps) {
  Vec out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    ms /= C;
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] / std::sqrt(ms + eps) * w[c];
  }
  return out;
}

// 1 / sqrt(mean(x^2) + eps) of each row.
inline Vec rmsnorm_rstd(const Vec& x, int64_t N, int C, double eps) {
  Vec r(N);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    r[n] = 1.0 / std::sqrt(ms / C + eps);
  }
  return r;
}

// y = x W^T + b, W [OC, IC]
inline Vec linear(const Vec& x, const Vec& w, const Vec* b, int64_t N, int IC, int OC) {
  Vec out(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int i = 0; i < IC; ++i) s += x[n * IC + i] * w[size_t(o) * IC + i];
      out[n * OC + o] = s;
    }
  return out;
}

// Hugging Face apply_rotary_pos_emb, literally: emb = cat(freqs, freqs),
// x * cos(emb) + rotate_half(x) * sin(emb), rotate_half(x) = cat(-x2, x1).
inline Vec rope(const Vec& x, int B, int T, int H, int D, int64_t row_stride, double theta,
                int pos0) {
  Vec out = x;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const size_t base = (size_t(b) * T + t) * row_stride + size_t(h) * D;
        for (int i = 0; i < D; ++i) {
          const int k = i % (D / 2);
          const double inv_freq = 1.0 / std::pow(theta, double(2 * k) / D);
          const double emb = double(pos0 + t) * inv_freq;
          const double rot = i < D / 2 ? -x[base + i + D / 2] : x[base + i - D / 2];
          out[base + i] = x[base + i] * std::cos(emb) + rot * std::sin(emb);
        }
      }
  return out;
}

// Causal GQA attention from the full score matrix. qkv [B,T,(Hq+2Hkv)D].
inline void attention(const Vec& qkv, int B, int T, int Hq, int Hkv, int D, Vec& out, Vec& lse) {
  const int64_t QS = int64_t(Hq + 2 * Hkv) * D;
  out.assign(size_t(B) * T * Hq * D, 0.0);
  lse.assign(size_t(B) * Hq * T, 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int g = h / (Hq / Hkv);
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(T, -INFINITY);
        double m = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < D; ++c)
            d += qkv[(size_t(b) * T + i) * QS + size_t(h) * D + c] *
                 qkv[(size_t(b) * T + j) * QS + size_t(Hq + g) * D + c];
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(s[j] - m);
        lse[(size_t(b) * Hq + h) * T + i] = m + std::log(z);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - m) / z;
          for (int c = 0; c < D; ++c)
            out[(size_t(b) * T + i) * Hq * D + size_t(h) * D + c] +=
                p * qkv[(size_t(b) * T + j) * QS + size_t(Hq + Hkv + g) * D + c];
        }
      }
    }
}

// Generation's cache append: k and v of rows i < n (qkv rows q_stride apart)
// at positions pos0 + i of caches of Hkv x max_len x D that start as zeros.
inline std::pair<Vec, Vec> kv_cache_append(const Vec& qkv, int64_t q_stride, int n, int pos0,
                                           int Hq, int Hkv, int D, int max_len) {
  Vec kc(size_t(Hkv) * max_len * D, 0.0), vc(kc.size(), 0.0);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < Hkv; ++h)
      for (int c = 0; c < D; ++c) {
        const size_t at = (size_t(h) * max_len + size_t(pos0 + i)) * D + size_t(c);
        kc[at] = qkv[size_t(i * q_stride + (Hq + h) * D + c)];
        vc[at] = qkv[size_t(i * q_stride + (Hq + Hkv + h) * D + c)];
      }
  return {kc, vc};
}

// Generation's attention: n queries at positions pos0 .. pos0+n-1 (query i,
// head h at q[i * q_stride + h * D]) over a KV cache kc, vc [Hkv, max_len, D].
inline Vec attention_cached(const Vec& q, int64_t q_stride, const Vec& kc, const Vec& vc, int n,
                            int pos0, int Hq, int Hkv, int D, int max_len) {
  Vec out(size_t(n) * Hq * D, 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < Hq; ++h) {
      const int g = h / (Hq / Hkv);
      const size_t kv = size_t(g) * max_len * D;
      std::vector<double> s(size_t(pos0 + i + 1));
      double m = -INFINITY;
      for (int j = 0; j <= pos0 + i; ++j) {
        double d = 0;
        for (int c = 0; c < D; ++c) d += q[i * q_stride + h * D + c] * kc[kv + size_t(j) * D + c];
        s[j] = d * scale;
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (double x : s) z += std::exp(x - m);
      for (int j = 0; j <= pos0 + i; ++j)
        for (int c = 0; c < D; ++c)
          out[(size_t(i) * Hq + h) * D + c] += std::exp(s[j] - m) / z * vc[kv + size_t(j) * D + c];
    }
  return out;
}

inline Vec swiglu(const Vec& gateup, int64_t N, int F) {
  Vec h(N * F);
  for (int64_t n = 0; n < N; ++n)
    for (int j = 0; j < F; ++j) {
      const double g = gateup[n * 2 * F + j], u = gateup[n * 2 * F + F + j];
      h[n * F + j] = g / (1.0 + std::exp(-g)) * u;
    }
  return h;
}

// Final norm + head + cross-entropy with the full [N, V] logits.
struct CeResult {
  double loss_sum = 0;
  int64_t n_valid = 0;
  Vec nll, lse, logits;
};
// With v0 > 0, wout holds rows [v0, v0 + V) of a larger vocabulary (one
// rank's shard): lse is over those V logits, and the target's logit counts
// only where the shard holds the target (0 otherwise).
inline CeResult head_ce(const Vec& x, const Vec& wn, const Vec& wout,
                        const std::vector<int32_t>& targets, int64_t N, int C, int V, double eps,
                        int32_t ignore_index, int64_t v0 = 0) {
  CeResult r;
  const Vec xn = rmsnorm(x, wn, N, C, eps);
  r.logits = linear(xn, wout, nullptr, N, C, V);
  r.nll.assign(N, 0.0);
  r.lse.assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m = -INFINITY;
    for (int v = 0; v < V; ++v) m = std::max(m, r.logits[n * V + v]);
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(r.logits[n * V + v] - m);
    r.lse[n] = m + std::log(z);
    if (targets[n] == ignore_index) continue;
    const int64_t y = targets[n] - v0;
    r.nll[n] = r.lse[n] - (y >= 0 && y < V ? r.logits[n * V + y] : 0.0);
    r.loss_sum += r.nll[n];
    ++r.n_valid;
  }
  return r;
}

// torch.nn.MSELoss (reduction "mean").
inline double mse(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s / double(a.size());
}

// torch.optim.AdamW, one step, as its documentation writes it.
inline void adamw(Vec& p, const Vec& g, Vec& m, Vec& v, int64_t t, double lr, double b1, double b2,
                  double eps, double wd) {
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double mhat = m[i] / (1 - std::pow(b1, double(t)));
    const double vhat = v[i] / (1 - std::pow(b2, double(t)));
    p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

}  // namespace strata::reference
