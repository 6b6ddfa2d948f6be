// The golden reference of the standard plan: the executor as it was before the
// executor v2 refactor (commit 6ef261f, src/model/model.cpp), written out as
// one straight sequence of backend calls. The same kernels in the same order,
// so Model's losses and gradients for a standard plan must equal these
// bitwise, alone and under tensor parallelism (tests/model_test.cpp,
// tests/mpi_model_test.cpp). A refactor that changes the numerics of the
// standard plan fails here.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/model.h"
#include "parallel/comm.h"

namespace strata::testing {

struct GoldenResult {
  double loss_sum = 0;
  int64_t n_valid = 0;
  std::vector<float> grads;  // this rank's gradient arena
};

// Loss and gradients of dloss * loss_sum for tokens/targets [B*T] with the
// model's weights, through the fused head (forward_backward) or the separate
// head backward (forward, then backward).
inline GoldenResult golden_standard(Model<float>& m, const int32_t* tokens, const int32_t* targets,
                                    int B, int T, double dloss, bool fused, Communicator* tp) {
  const LlamaConfig& c = m.config();
  const ParamLayout& lay = m.layout();
  ops::Backend<float>& be = m.backend();
  const int P = tp && tp->size() > 1 ? tp->size() : 1, rank = P > 1 ? tp->rank() : 0;
  if (P == 1) tp = nullptr;
  const int64_t N = int64_t(B) * T, C = c.hidden_size, NC = N * C;
  const int L = c.num_hidden_layers, D = c.head_dim, Hq = c.num_attention_heads / P,
            Hkv = c.num_key_value_heads / P, Q = Hq * D, QKV = (Hq + 2 * Hkv) * D,
            F = c.intermediate_size / P, Vl = c.vocab_size / P;
  auto buf = [&](int64_t n) { return std::vector<float>(size_t(n), 0.0f); };
  auto ar = [&](float* x, int64_t n) {
    if (tp) tp->allreduce_sum(x, n);
  };
  std::vector<float> grads = buf(lay.total());
  auto p = [&](int i) { return m.param(i); };
  auto g = [&](int i) { return grads.data() + lay[i].offset; };
  std::vector<std::vector<float>> x(size_t(2 * L + 1), buf(NC));
  struct Acts {
    std::vector<float> ln1, rstd1, qkv, att, lse, ln2, rstd2, gateup, h;
  };
  std::vector<Acts> A(static_cast<size_t>(L));
  std::vector<float> mod = buf(NC);
  const int half = D / 2;
  std::vector<float> cos(size_t(c.max_position_embeddings) * half),
      sin(size_t(c.max_position_embeddings) * half);
  std::copy_n(m.rope_cos(), cos.size(), cos.data());
  std::copy_n(m.rope_sin(), sin.size(), sin.data());

  be.embedding_forward(x[0].data(), tokens, p(lay.embed), N, int(C), c.vocab_size,
                       int64_t(rank) * Vl, tp ? Vl : -1);
  ar(x[0].data(), NC);
  for (int l = 0; l < L; ++l) {
    const auto& W = lay.layers[size_t(l)];
    Acts& a = A[size_t(l)];
    a = Acts{buf(NC), buf(N), buf(N * QKV),   buf(N * Q), buf(int64_t(B) * Hq * T),
             buf(NC), buf(N), buf(N * 2 * F), buf(N * F)};
    const int i = 2 * l + 1;
    be.rmsnorm_forward(a.ln1.data(), a.rstd1.data(), x[i - 1].data(), p(W.input_norm), N, int(C),
                       c.rms_norm_eps);
    be.linear_forward(a.qkv.data(), a.ln1.data(), p(W.q), W.q_bias >= 0 ? p(W.q_bias) : nullptr, N,
                      int(C), QKV);
    be.rope_forward(a.qkv.data(), cos.data(), sin.data(), B, T, Hq + Hkv, D, QKV, 0);
    be.attention_forward(a.att.data(), a.lse.data(), a.qkv.data(), B, T, Hq, Hkv, D);
    be.linear_forward(mod.data(), a.att.data(), p(W.o),
                      W.o_bias >= 0 && rank == 0 ? p(W.o_bias) : nullptr, N, Q, int(C));
    ar(mod.data(), NC);
    be.residual_forward(x[i].data(), x[i - 1].data(), mod.data(), NC);
    be.rmsnorm_forward(a.ln2.data(), a.rstd2.data(), x[i].data(), p(W.post_norm), N, int(C),
                       c.rms_norm_eps);
    be.linear_forward(a.gateup.data(), a.ln2.data(), p(W.gate), nullptr, N, int(C), 2 * F);
    be.swiglu_forward(a.h.data(), a.gateup.data(), N, F);
    be.linear_forward(mod.data(), a.h.data(), p(W.down), nullptr, N, F, int(C));
    ar(mod.data(), NC);
    be.residual_forward(x[i + 1].data(), x[i].data(), mod.data(), NC);
  }

  const int head = lay.lm_head >= 0 ? lay.lm_head : lay.embed;
  std::vector<float> dstream = buf(NC), lnf = buf(NC), rstdf = buf(N), lsef = buf(N);
  GoldenResult r;
  if (tp) {
    // The vocab-parallel head: this rank's statistics, the combine (the
    // global lse from every rank's local one, the target logit summed), the
    // loss; backward: this rank's part of dxn, summed, then the norm.
    const int64_t v0 = int64_t(rank) * Vl;
    std::vector<float> target = buf(N), scratch(size_t(N) * P), dxn = buf(NC);
    be.head_ce_shard_stats(lnf.data(), rstdf.data(), lsef.data(), target.data(),
                           x[size_t(2 * L)].data(), p(lay.final_norm), p(head), targets, N, int(C),
                           Vl, v0, c.rms_norm_eps);
    tp->allgather(lsef.data(), scratch.data(), N);
    for (int64_t i = 0; i < N; ++i) {
      float mx = scratch[size_t(i)];
      for (int q = 1; q < P; ++q) mx = std::max(mx, scratch[size_t(q) * N + i]);
      double z = 0;
      for (int q = 0; q < P; ++q) z += std::exp(double(scratch[size_t(q) * N + i] - mx));
      lsef[size_t(i)] = float(double(mx) + std::log(z));
    }
    tp->allreduce_sum(target.data(), N);
    r.loss_sum = be.head_ce_shard_loss(nullptr, &r.n_valid, lsef.data(), target.data(), targets, N);
    be.head_ce_shard_backward(dxn.data(), g(head), lnf.data(), lsef.data(), p(head), targets, N,
                              int(C), Vl, v0, dloss);
    tp->allreduce_sum(dxn.data(), NC);
    be.rmsnorm_backward(dstream.data(), g(lay.final_norm), dxn.data(), x[size_t(2 * L)].data(),
                        p(lay.final_norm), rstdf.data(), N, int(C));
  } else if (fused) {
    r.loss_sum = be.head_ce_forward_backward(dstream.data(), g(lay.final_norm), g(head), lnf.data(),
                                             rstdf.data(), &r.n_valid, x[size_t(2 * L)].data(),
                                             p(lay.final_norm), p(head), targets, N, int(C), Vl,
                                             c.rms_norm_eps, dloss);
  } else {
    r.loss_sum = be.head_ce_forward(lnf.data(), rstdf.data(), lsef.data(), nullptr, &r.n_valid,
                                    x[size_t(2 * L)].data(), p(lay.final_norm), p(head), targets, N,
                                    int(C), Vl, c.rms_norm_eps);
    be.head_ce_backward(dstream.data(), g(lay.final_norm), g(head), x[size_t(2 * L)].data(),
                        lnf.data(), rstdf.data(), lsef.data(), p(lay.final_norm), p(head), targets,
                        N, int(C), Vl, dloss);
  }

  std::vector<float> d_ln = buf(NC), d_qkv = buf(N * QKV), d_att = buf(N * Q),
                     d_gateup = buf(N * 2 * F), d_h = buf(N * F);
  for (int l = L - 1; l >= 0; --l) {
    const auto& W = lay.layers[size_t(l)];
    Acts& a = A[size_t(l)];
    const int i = 2 * l + 1;
    float* ds = dstream.data();
    be.linear_backward(d_h.data(), g(W.down), nullptr, ds, a.h.data(), p(W.down), N, F, int(C),
                       false);
    be.swiglu_backward(d_gateup.data(), d_h.data(), a.gateup.data(), N, F);
    be.linear_backward(d_ln.data(), g(W.gate), nullptr, d_gateup.data(), a.ln2.data(), p(W.gate), N,
                       int(C), 2 * F, false);
    ar(d_ln.data(), NC);
    be.rmsnorm_backward(ds, g(W.post_norm), d_ln.data(), x[size_t(i)].data(), p(W.post_norm),
                        a.rstd2.data(), N, int(C));
    be.linear_backward(d_att.data(), g(W.o), W.o_bias >= 0 ? g(W.o_bias) : nullptr, ds,
                       a.att.data(), p(W.o), N, Q, int(C), false);
    be.attention_backward(d_qkv.data(), d_att.data(), a.qkv.data(), a.att.data(), a.lse.data(), B,
                          T, Hq, Hkv, D);
    be.rope_backward(d_qkv.data(), cos.data(), sin.data(), B, T, Hq + Hkv, D, QKV, 0);
    be.linear_backward(d_ln.data(), g(W.q), W.q_bias >= 0 ? g(W.q_bias) : nullptr, d_qkv.data(),
                       a.ln1.data(), p(W.q), N, int(C), QKV, false);
    ar(d_ln.data(), NC);
    be.rmsnorm_backward(ds, g(W.input_norm), d_ln.data(), x[size_t(i - 1)].data(), p(W.input_norm),
                        a.rstd1.data(), N, int(C));
  }
  be.embedding_backward(g(lay.embed), tokens, dstream.data(), N, int(C), int64_t(rank) * Vl,
                        tp ? Vl : -1);
  r.grads = std::move(grads);
  return r;
}

}  // namespace strata::testing
