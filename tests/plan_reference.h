// The residual streams x_0..x_2L of a layer plan computed in double from the
// equations of each kind with the reference ops (tests/reference.h): what the
// ladder, parallel and Layer-Parallelism tests compare the executor with.
//   standard, nocomm (alone): x_i = x_{i-1} + h_i(x_{i-1})
//   ladder:   x_i = x_{i-1} + h_i(x_{i-2}),  x_{-1} := x_0
//   parallel: x_{2l+2} = x_{2l} + attn(n) + mlp(n), n = norm_attn(x_{2l}); x_{2l+1} := x_{2l+2}
//   skip:     x_i = x_{i-1}
//   lp pair (k, k+1) (the deployed Layer-Parallel graph, paper eq. B.2):
//             h = x + A_k(x) + A_{k+1}(x), u = rmsnorm(h; a g_k + (1 - a) g_{k+1}),
//             y = h + MLP_k(u) + MLP_{k+1}(u); x_{2k+1..2k+3} := h, x_{2k+4} = y
//   par group of G layers from f (the PAR approximation, eq. 2, section 3):
//             y = x + sum_i [A_i(x) + F_i(x + A_i(x))]; x_{2i+1} := x + A_i(x),
//             x_{2i+2} := x inside the group, x_{2(f+G)} = y
//   spd of degree g > 1 (the per-device maths of the SPD paper, Figure 3):
//             device j holds heads [j H/g, (j+1) H/g) (and its kv heads) and MLP
//             columns [j F/g, (j+1) F/g); P_j = its o_proj partial, h_j = x +
//             P_j + b, y = x + sum_j [P_j + MLP_j(h_j)] + b; x_{2l+1} := x
//   shuffle run of n layers from f (pass `pass`): position j runs layer
//             f + perm[j] as a standard layer on streams 2(f+j)..2(f+j+1),
//             perm = kinds::shuffle_permutation(shuffle_seed, f, n, pass)
// A kind without a rule here fails the test that asked for it (every kind
// of kind_table() is checked against this reference, tests/kinds_test.cpp).
//   lp pair with `par` (the paper's PAR approximation, eq. 2):
//             y = x + A_k(x) + F_k(x + A_k(x)) + A_{k+1}(x) + F_{k+1}(x + A_{k+1}(x))
// With `keep` (LayerSkip layer dropout), layer l's module outputs are zero for
// the samples b with keep[l][b] == 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infer/generate.h"
#include "model/kinds/kinds.h"
#include "model/model.h"
#include "reference.h"
#include "testing.h"

namespace strata::testing {

using reference::Vec;

// The small model the plan and generation tests run (4 heads, 2 kv heads
// unless told, hidden 32).
inline LlamaConfig plan_test_config(int layers, bool tied, bool bias, int kv_heads = 2) {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  c.initializer_range = 0.5;
  c.finalize();
  return c;
}

// Norm weights and biases moved off their initial 1 / 0.
inline void perturb_vectors(Model<double>& m, uint32_t seed) {
  auto r = random_vec<double>(m.num_params(), seed, 0.3);
  for (const auto& t : m.layout().tensors())
    if (!t.is_matrix)
      for (int64_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] += r[t.offset + i];
}

// The largest |got - want| / (1 + |want|).
inline double worst_rel(const double* got, const Vec& want) {
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k)
    worst = std::max(worst, std::abs(got[k] - want[k]) / (1 + std::abs(want[k])));
  return worst;
}

// A random prompt of n tokens from the plan-test vocabulary, BOS first.
inline std::vector<int32_t> prompt_of(int n, uint32_t stream) {
  auto p = random_tokens(n, 61, stream);
  p[0] = 1;
  return p;
}

// KV-cache generation equals the cache-free path: greedy for prompts of 1
// and 7 tokens, and sampled.
inline void expect_cache_matches_no_cache(Model<float>& m, int new_tokens) {
  GenerateOptions o;
  o.max_new_tokens = new_tokens;
  for (int plen : {1, 7}) {
    const auto p = prompt_of(plen, uint32_t(plen));
    EXPECT_EQ(generate(m, p, o), generate_simple(m, p, o)) << "prompt " << plen;
  }
  o.sampling.temperature = 0.9;
  o.sampling.seed = 3;
  const auto p = prompt_of(5, 2);
  EXPECT_EQ(generate(m, p, o), generate_simple(m, p, o)) << "sampled";
}

// Copies every tensor of `dst` from the tensor of the same name in `src`
// (a model cut to its first layers).
inline void copy_by_name(Model<float>& src, Model<float>& dst) {
  for (const auto& info : dst.layout().tensors()) {
    const int from = src.layout().find(info.name);
    std::copy_n(src.param(from), info.numel, dst.param(dst.layout().find(info.name)));
  }
}

inline Vec tensor(Model<double>& m, int t) {
  const ParamInfo& p = m.layout()[t];
  return Vec(m.param(t), m.param(t) + p.numel);
}
inline Vec concat(Vec a, const Vec& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
inline Vec add(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t k = 0; k < a.size(); ++k) r[k] = a[k] + b[k];
  return r;
}

// Rows [r0, r1) and columns [c0, c1) of a row-major matrix with `cols` columns.
inline Vec rows_of(const Vec& w, int cols, int r0, int r1) {
  return Vec(w.begin() + int64_t(r0) * cols, w.begin() + int64_t(r1) * cols);
}
inline Vec cols_of(const Vec& w, int rows, int cols, int c0, int c1) {
  Vec r;
  for (int i = 0; i < rows; ++i)
    r.insert(r.end(), w.begin() + int64_t(i) * cols + c0, w.begin() + int64_t(i) * cols + c1);
  return r;
}

inline std::vector<Vec> reference_streams(Model<double>& m, const LayerPlan& plan,
                                          const std::vector<int32_t>& tokens, int B, int T,
                                          const std::vector<std::vector<uint8_t>>* keep = nullptr,
                                          bool par = false, uint64_t pass = 0) {
  const LlamaConfig& c = m.config();
  const ParamLayout& lay = m.layout();
  const int C = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads,
            Hkv = c.num_key_value_heads, QKV = (Hq + 2 * Hkv) * D, F = c.intermediate_size;
  const int64_t N = int64_t(B) * T;
  std::vector<Vec> x(size_t(2 * c.num_hidden_layers + 1));
  x[0] = reference::embedding(tokens, tensor(m, lay.embed), C);
  auto drop = [&](int l, Vec v) {
    if (keep)
      for (int b = 0; b < B; ++b)
        if (!(*keep)[size_t(l)][size_t(b)])
          std::fill_n(v.begin() + int64_t(b) * T * C, int64_t(T) * C, 0.0);
    return v;
  };
  // A layer's attention and MLP outputs (o_proj bias included) of an input.
  auto attn = [&](int l, const Vec& in) {
    const auto& P = lay.layers[size_t(l)];
    const Vec ln1 = reference::rmsnorm(in, tensor(m, P.input_norm), N, C, c.rms_norm_eps);
    const Vec wqkv = concat(concat(tensor(m, P.q), tensor(m, P.k)), tensor(m, P.v));
    Vec bqkv;
    if (c.attention_bias)
      bqkv = concat(concat(tensor(m, P.q_bias), tensor(m, P.k_bias)), tensor(m, P.v_bias));
    Vec qkv = reference::linear(ln1, wqkv, c.attention_bias ? &bqkv : nullptr, N, C, QKV);
    qkv = reference::rope(qkv, B, T, Hq + Hkv, D, QKV, c.rope_theta, 0);
    Vec att, lse;
    reference::attention(qkv, B, T, Hq, Hkv, D, att, lse);
    const Vec bo = c.attention_bias ? tensor(m, P.o_bias) : Vec();
    return drop(
        l, reference::linear(att, tensor(m, P.o), c.attention_bias ? &bo : nullptr, N, Hq * D, C));
  };
  auto mlp = [&](int l, const Vec& in, const Vec& norm) {
    const auto& P = lay.layers[size_t(l)];
    const Vec ln2 = reference::rmsnorm(in, norm, N, C, c.rms_norm_eps);
    const Vec gu =
        reference::linear(ln2, concat(tensor(m, P.gate), tensor(m, P.up)), nullptr, N, C, 2 * F);
    const Vec h = reference::swiglu(gu, N, F);
    return drop(l, reference::linear(h, tensor(m, P.down), nullptr, N, F, C));
  };
  auto post_norm = [&](int l) { return tensor(m, lay.layers[size_t(l)].post_norm); };
  const double alpha = plan.number("lp_alpha", 0.5);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const auto& P = lay.layers[size_t(l)];
    const int i = 2 * l + 1;
    const LayerKind kind = plan.kinds[size_t(l)];
    if (kind == LayerKind::Skip) {
      x[size_t(i)] = x[size_t(i + 1)] = x[size_t(i - 1)];
      continue;
    }
    if (kind == LayerKind::Par) {  // a group of G layers from l
      const int G = plan.unit_size(LayerKind::Par);
      const Vec in = x[size_t(i - 1)];
      Vec y = in;
      for (int j = l; j < l + G; ++j) {
        const Vec a = attn(j, in);
        const Vec t = add(in, a);
        y = add(add(y, a), mlp(j, t, post_norm(j)));
        x[size_t(2 * j + 1)] = t;
        x[size_t(2 * j + 2)] = in;
      }
      x[size_t(2 * (l + G))] = y;
      l += G - 1;
      continue;
    }
    if (kind == LayerKind::Spd && plan.number("spd_degree", 2) > 1) {
      const int g = int(plan.number("spd_degree", 2));
      const int hq = Hq / g, hkv = Hkv / g, f = F / g;
      const Vec& in = x[size_t(i - 1)];
      const Vec ln1 = reference::rmsnorm(in, tensor(m, P.input_norm), N, C, c.rms_norm_eps);
      const Vec bo = c.attention_bias ? tensor(m, P.o_bias) : Vec(size_t(C), 0.0);
      Vec y = in;
      for (int j = 0; j < g; ++j) {  // device j, from the full weights
        const Vec wq = rows_of(tensor(m, P.q), C, j * hq * D, (j + 1) * hq * D);
        const Vec wk = rows_of(tensor(m, P.k), C, j * hkv * D, (j + 1) * hkv * D);
        const Vec wv = rows_of(tensor(m, P.v), C, j * hkv * D, (j + 1) * hkv * D);
        Vec bqkv;  // (rows_of with one column: a slice of a vector)
        if (c.attention_bias)
          bqkv = concat(concat(rows_of(tensor(m, P.q_bias), 1, j * hq * D, (j + 1) * hq * D),
                               rows_of(tensor(m, P.k_bias), 1, j * hkv * D, (j + 1) * hkv * D)),
                        rows_of(tensor(m, P.v_bias), 1, j * hkv * D, (j + 1) * hkv * D));
        const int qkv_j = (hq + 2 * hkv) * D;
        Vec qkv = reference::linear(ln1, concat(concat(wq, wk), wv),
                                    c.attention_bias ? &bqkv : nullptr, N, C, qkv_j);
        qkv = reference::rope(qkv, B, T, hq + hkv, D, qkv_j, c.rope_theta, 0);
        Vec att, lse;
        reference::attention(qkv, B, T, hq, hkv, D, att, lse);
        const Vec wo = cols_of(tensor(m, P.o), C, Hq * D, j * hq * D, (j + 1) * hq * D);
        const Vec pj = reference::linear(att, wo, nullptr, N, hq * D, C);
        Vec hj = add(in, pj);
        for (int64_t r = 0; r < N; ++r)
          for (int k = 0; k < C; ++k) hj[size_t(r * C + k)] += bo[size_t(k)];
        const Vec ln2 = reference::rmsnorm(hj, post_norm(l), N, C, c.rms_norm_eps);
        const Vec wg = rows_of(tensor(m, P.gate), C, j * f, (j + 1) * f);
        const Vec wu = rows_of(tensor(m, P.up), C, j * f, (j + 1) * f);
        const Vec act =
            reference::swiglu(reference::linear(ln2, concat(wg, wu), nullptr, N, C, 2 * f), N, f);
        const Vec wd = cols_of(tensor(m, P.down), C, F, j * f, (j + 1) * f);
        y = add(add(y, pj), reference::linear(act, wd, nullptr, N, f, C));
      }
      for (int64_t r = 0; r < N; ++r)
        for (int k = 0; k < C; ++k) y[size_t(r * C + k)] += bo[size_t(k)];
      x[size_t(i)] = in;
      x[size_t(i + 1)] = y;
      continue;
    }
    if (kind == LayerKind::Lp) {  // the pair (l, l + 1)
      const Vec& in = x[size_t(i - 1)];
      Vec y;
      if (par) {
        const Vec a0 = attn(l, in), a1 = attn(l + 1, in);
        y = add(add(in, a0), mlp(l, add(in, a0), post_norm(l)));
        y = add(add(y, a1), mlp(l + 1, add(in, a1), post_norm(l + 1)));
        x[size_t(i)] = x[size_t(i + 1)] = x[size_t(i + 2)] = y;  // (no inner stream)
      } else {
        const Vec h = add(add(in, attn(l, in)), attn(l + 1, in));
        Vec mixed = post_norm(l);
        const Vec second = post_norm(l + 1);
        for (int k = 0; k < C; ++k)
          mixed[size_t(k)] = alpha * mixed[size_t(k)] + (1 - alpha) * second[size_t(k)];
        y = add(add(h, mlp(l, h, mixed)), mlp(l + 1, h, mixed));
        x[size_t(i)] = x[size_t(i + 1)] = x[size_t(i + 2)] = h;
      }
      x[size_t(i + 3)] = y;
      ++l;
      continue;
    }
    if (kind == LayerKind::Shuffle) {  // the run from l in this pass's order
      int n = 0;
      while (l + n < c.num_hidden_layers && plan.kinds[size_t(l + n)] == LayerKind::Shuffle) ++n;
      const auto perm =
          kinds::shuffle_permutation(uint64_t(plan.number("shuffle_seed", 0)), l, n, pass);
      for (int j = 0; j < n; ++j) {
        const int w = l + perm[size_t(j)], s = 2 * (l + j) + 1;
        x[size_t(s)] = add(x[size_t(s - 1)], attn(w, x[size_t(s - 1)]));
        x[size_t(s + 1)] = add(x[size_t(s)], mlp(w, x[size_t(s)], post_norm(w)));
      }
      l += n - 1;
      continue;
    }
    const bool ladder = kind == LayerKind::Ladder, parallel = kind == LayerKind::Parallel;
    if (!(ladder || parallel || kind == LayerKind::Standard || kind == LayerKind::NoComm ||
          kind == LayerKind::Spd)) {
      ADD_FAILURE() << "tests/plan_reference.h has no reference for layer kind '"
                    << layer_kind_name(kind) << "'";
      return x;
    }
    const Vec& ain = ladder ? x[size_t(std::max(i - 2, 0))] : x[size_t(i - 1)];
    x[size_t(i)] = add(x[size_t(i - 1)], attn(l, ain));
    const Vec& min = ladder || parallel ? x[size_t(i - 1)] : x[size_t(i)];
    x[size_t(i + 1)] =
        add(x[size_t(i)], mlp(l, min, tensor(m, parallel ? P.input_norm : P.post_norm)));
    if (parallel) x[size_t(i)] = x[size_t(i + 1)];
  }
  return x;
}

// Model m (under `plan`) with seeded weights and perturbed vectors, run on
// random tokens [2 x 6]: every stream and the loss must equal the reference.
// Returns the reference streams; `tokens_out` receives the tokens.
inline std::vector<Vec> expect_streams_match_reference(Model<double>& m, const LayerPlan& plan,
                                                       std::vector<int32_t>* tokens_out = nullptr) {
  const LlamaConfig& c = m.config();
  m.init_weights(3);
  perturb_vectors(m, 4);
  const int B = 2, T = 6;
  const auto tokens = random_tokens(B * T, c.vocab_size, 5);
  const auto targets = random_tokens(B * T, c.vocab_size, 6);
  const LossResult r = m.forward(tokens.data(), targets.data(), B, T);
  const auto x = reference_streams(m, plan, tokens, B, T);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_LT(worst_rel(m.stream(int(i)), x[i]), 1e-12) << "stream " << i;
  const auto ce = reference::head_ce(
      x.back(), tensor(m, m.layout().final_norm),
      tensor(m, c.tie_word_embeddings ? m.layout().embed : m.layout().lm_head), targets, B * T,
      c.hidden_size, c.vocab_size, c.rms_norm_eps, ops::kIgnoreIndex);
  EXPECT_NEAR(r.loss_sum, ce.loss_sum, 1e-10 * std::abs(ce.loss_sum));
  if (tokens_out) *tokens_out = tokens;
  return x;
}

}  // namespace strata::testing
