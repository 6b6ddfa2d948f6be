#include "model/modules.h"

namespace strata {

LayerDims LayerDims::of(const LlamaConfig& c, int parts, bool held) {
  LayerDims d;
  d.C = c.hidden_size;
  d.D = c.head_dim;
  d.Hq = held ? c.num_attention_heads / parts : 0;
  d.Hkv = held ? c.num_key_value_heads / parts : 0;
  d.F = held ? c.intermediate_size / parts : 0;
  d.eps = c.rms_norm_eps;
  return d;
}

template <typename T>
void attention_partial(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                       ops::ActIn<T> x, ops::Act<T> out, int64_t N, const AttentionActs<T>& a,
                       const AttentionCore<T>& core) {
  // The norm runs even where the rank holds none of the layer: its input
  // gradient (replicated, after copy_to_tp) needs the statistics.
  be.rmsnorm_forward(a.ln, a.rstd, x, w.input_norm, N, d.C, d.eps);
  if (d.empty()) return be.zero(out, N * d.C);
  // q, k, v weights (and biases) are contiguous: one GEMM for all three.
  be.linear_forward(a.qkv, a.ln, w.qkv, w.qkv_bias, N, d.C, d.QKV());
  core(a.qkv, a.att);
  be.linear_forward(out, a.att, w.o, nullptr, N, d.Q(), d.C);
}

template <typename T>
void mlp_partial(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w, ops::ActIn<T> x,
                 ops::Act<T> out, int64_t N, const MlpActs<T>& a) {
  be.rmsnorm_forward(a.ln, a.rstd, x, w.post_norm, N, d.C, d.eps);
  if (d.empty()) return be.zero(out, N * d.C);
  be.linear_forward(a.gateup, a.ln, w.gateup, nullptr, N, d.C, 2 * d.F);  // gate|up fused
  be.swiglu_forward(a.h, a.gateup, N, d.F);
  be.linear_forward(out, a.h, w.down, nullptr, N, d.F, d.C);
}

namespace {

// d_att[N, Q] -> d_ln[N, C]: attention, RoPE and q|k|v backward (every head
// of the rank at once).
template <typename T>
void attention_core_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                             const LayerTensors<T>& g, ops::Act<T> d_att, ops::Act<T> d_ln, int B,
                             int seq, const AttentionActs<T>& a, const T* rope_cos,
                             const T* rope_sin, ops::Act<T> d_qkv) {
  const int64_t N = int64_t(B) * seq;
  be.attention_backward(d_qkv, d_att, a.qkv, a.att, a.lse, B, seq, d.Hq, d.Hkv, d.D);
  be.rope_backward(d_qkv, rope_cos, rope_sin, B, seq, d.Hq + d.Hkv, d.D, d.QKV(), 0);
  be.linear_backward(d_ln, g.qkv, g.qkv_bias, d_qkv, a.ln, w.qkv, N, d.C, d.QKV(), false);
}

}  // namespace

template <typename T>
void attention_partial_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                                const LayerTensors<T>& g, ops::ActIn<T> dout, ops::Act<T> d_ln,
                                int B, int seq, const AttentionActs<T>& a, const T* rope_cos,
                                const T* rope_sin, ops::Act<T> d_att, ops::Act<T> d_qkv) {
  const int64_t N = int64_t(B) * seq;
  if (d.empty()) return be.zero(d_ln, N * d.C);
  be.linear_backward(d_att, g.o, nullptr, dout, a.att, w.o, N, d.Q(), d.C, false);
  attention_core_backward(be, d, w, g, d_att, d_ln, B, seq, a, rope_cos, rope_sin, d_qkv);
}

template <typename T>
void mlp_partial_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                          const LayerTensors<T>& g, ops::ActIn<T> dout, ops::Act<T> d_ln, int64_t N,
                          const MlpActs<T>& a, ops::Act<T> d_h, ops::Act<T> d_gateup) {
  if (d.empty()) return be.zero(d_ln, N * d.C);
  be.linear_backward(d_h, g.down, nullptr, dout, a.h, w.down, N, d.F, d.C, false);
  be.swiglu_backward(d_gateup, d_h, a.gateup, N, d.F);
  be.linear_backward(d_ln, g.gateup, nullptr, d_gateup, a.ln, w.gateup, N, d.C, 2 * d.F, false);
}

template <typename T>
void spd_block_partial(ops::Backend<T>& be, const LayerDims& d, int V, const LayerTensors<T>& w,
                       ops::ActIn<T> x, ops::Act<T> out, int64_t N, const AttentionActs<T>& a,
                       const std::function<SpdActs<T>(int)>& acts, ops::Act<T> p,
                       const AttentionCore<T>& core) {
  const int C = d.C, Q = d.Q(), Qv = Q / V, F = d.F, Fv = F / V;
  be.rmsnorm_forward(a.ln, a.rstd, x, w.input_norm, N, C, d.eps);
  be.linear_forward(a.qkv, a.ln, w.qkv, w.qkv_bias, N, C, d.QKV());
  core(a.qkv, a.att);  // every head of the rank: each head's output is its own
  be.zero(out, N * C);
  const T* gate = w.gateup;
  const T* up = w.gateup + int64_t(F) * C;
  for (int j = 0; j < V; ++j) {
    const SpdActs<T> s = acts(j);
    // P_j: virtual rank j's heads through its columns of o_proj.
    be.linear_forward(p, a.att + int64_t(j) * Qv, w.o + int64_t(j) * Qv, nullptr, N, Qv, C,
                      {Q, Q, 0});
    be.residual_forward(s.h, x, p, N * C);
    if (w.o_bias) be.bias_add_forward(s.h, w.o_bias, N, C);
    // Z_j: its MLP columns on its own input.
    be.rmsnorm_forward(s.ln, s.rstd, s.h, w.post_norm, N, C, d.eps);
    be.linear_forward(s.gateup, s.ln, gate + int64_t(j) * Fv * C, nullptr, N, C, Fv,
                      {0, 0, 2 * Fv});
    be.linear_forward(s.gateup + Fv, s.ln, up + int64_t(j) * Fv * C, nullptr, N, C, Fv,
                      {0, 0, 2 * Fv});
    be.swiglu_forward(s.act, s.gateup, N, Fv);
    be.residual_forward(out, out, p, N * C);
    be.linear_forward(p, s.act, w.down + int64_t(j) * Fv, nullptr, N, Fv, C, {0, F, 0});
    be.residual_forward(out, out, p, N * C);
  }
}

template <typename T>
void spd_block_partial_backward(ops::Backend<T>& be, const LayerDims& d, int V,
                                const LayerTensors<T>& w, const LayerTensors<T>& g, T* dnorm,
                                T* dbias, ops::ActIn<T> dout, ops::Act<T> dx, ops::Act<T> d_ln,
                                int B, int seq, const AttentionActs<T>& a,
                                const std::function<SpdActs<T>(int)>& acts, const T* rope_cos,
                                const T* rope_sin, ops::Act<T> dp, ops::Act<T> dh,
                                ops::Act<T> d_att, ops::Act<T> d_qkv, ops::Act<T> d_act,
                                ops::Act<T> d_gateup) {
  const int64_t N = int64_t(B) * seq;
  const int C = d.C, Q = d.Q(), Qv = Q / V, F = d.F, Fv = F / V;
  const T* gate = w.gateup;
  const T* up = w.gateup + int64_t(F) * C;
  T* ggate = g.gateup;
  T* gup = g.gateup ? g.gateup + int64_t(F) * C : nullptr;
  for (int j = 0; j < V; ++j) {
    const SpdActs<T> s = acts(j);
    // Z_j = down_j(swiglu(gate_j, up_j)(norm(h_j))): dout reaches it unchanged.
    be.linear_backward(d_act, g.down ? g.down + int64_t(j) * Fv : nullptr, nullptr, dout, s.act,
                       w.down + int64_t(j) * Fv, N, Fv, C, false, {0, F, 0});
    be.swiglu_backward(d_gateup, d_act, s.gateup, N, Fv);
    be.linear_backward(dp, ggate ? ggate + int64_t(j) * Fv * C : nullptr, nullptr, d_gateup, s.ln,
                       gate + int64_t(j) * Fv * C, N, C, Fv, false, {0, 0, 2 * Fv});
    be.linear_backward(dp, gup ? gup + int64_t(j) * Fv * C : nullptr, nullptr, d_gateup + Fv, s.ln,
                       up + int64_t(j) * Fv * C, N, C, Fv, true, {0, 0, 2 * Fv});
    be.zero(dh, N * C);
    be.rmsnorm_backward(dh, dnorm, dp, s.h, w.post_norm, s.rstd, N, C);
    if (dbias) be.bias_add_backward(dbias, dh, N, C);
    be.residual_forward(dx, dx, dh, N * C);  // h_j = x + P_j (+ b)
    // P_j feeds h_j and the block output: dP_j = dout + dh_j.
    be.residual_forward(dh, dh, dout, N * C);
    be.linear_backward(d_att + int64_t(j) * Qv, g.o ? g.o + int64_t(j) * Qv : nullptr, nullptr, dh,
                       a.att + int64_t(j) * Qv, w.o + int64_t(j) * Qv, N, Qv, C, false, {Q, Q, 0});
  }
  attention_core_backward(be, d, w, g, d_att, d_ln, B, seq, a, rope_cos, rope_sin, d_qkv);
}

#define STRATA_INSTANTIATE(T)                                                     \
  template decltype(attention_partial<T>) attention_partial<T>;                   \
  template decltype(mlp_partial<T>) mlp_partial<T>;                               \
  template decltype(attention_partial_backward<T>) attention_partial_backward<T>; \
  template decltype(mlp_partial_backward<T>) mlp_partial_backward<T>;             \
  template decltype(spd_block_partial<T>) spd_block_partial<T>;                   \
  template decltype(spd_block_partial_backward<T>) spd_block_partial_backward<T>;
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(double)
#undef STRATA_INSTANTIATE

}  // namespace strata
