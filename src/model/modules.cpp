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
                       const T* x, T* out, int64_t N, const AttentionActs<T>& a,
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
void mlp_partial(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w, const T* x,
                 T* out, int64_t N, const MlpActs<T>& a) {
  be.rmsnorm_forward(a.ln, a.rstd, x, w.post_norm, N, d.C, d.eps);
  if (d.empty()) return be.zero(out, N * d.C);
  be.linear_forward(a.gateup, a.ln, w.gateup, nullptr, N, d.C, 2 * d.F);  // gate|up fused
  be.swiglu_forward(a.h, a.gateup, N, d.F);
  be.linear_forward(out, a.h, w.down, nullptr, N, d.F, d.C);
}

template <typename T>
void attention_partial_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                                const LayerTensors<T>& g, const T* dout, T* d_ln, int B, int seq,
                                const AttentionActs<T>& a, const T* rope_cos, const T* rope_sin,
                                T* d_att, T* d_qkv) {
  const int64_t N = int64_t(B) * seq;
  if (d.empty()) return be.zero(d_ln, N * d.C);
  be.linear_backward(d_att, g.o, nullptr, dout, a.att, w.o, N, d.Q(), d.C, false);
  be.attention_backward(d_qkv, d_att, a.qkv, a.att, a.lse, B, seq, d.Hq, d.Hkv, d.D);
  be.rope_backward(d_qkv, rope_cos, rope_sin, B, seq, d.Hq + d.Hkv, d.D, d.QKV(), 0);
  be.linear_backward(d_ln, g.qkv, g.qkv_bias, d_qkv, a.ln, w.qkv, N, d.C, d.QKV(), false);
}

template <typename T>
void mlp_partial_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                          const LayerTensors<T>& g, const T* dout, T* d_ln, int64_t N,
                          const MlpActs<T>& a, T* d_h, T* d_gateup) {
  if (d.empty()) return be.zero(d_ln, N * d.C);
  be.linear_backward(d_h, g.down, nullptr, dout, a.h, w.down, N, d.F, d.C, false);
  be.swiglu_backward(d_gateup, d_h, a.gateup, N, d.F);
  be.linear_backward(d_ln, g.gateup, nullptr, d_gateup, a.ln, w.gateup, N, d.C, 2 * d.F, false);
}

#define STRATA_INSTANTIATE(T)                                                                     \
  template void attention_partial<T>(ops::Backend<T>&, const LayerDims&, const LayerTensors<T>&,  \
                                     const T*, T*, int64_t, const AttentionActs<T>&,              \
                                     const AttentionCore<T>&);                                    \
  template void mlp_partial<T>(ops::Backend<T>&, const LayerDims&, const LayerTensors<T>&,        \
                               const T*, T*, int64_t, const MlpActs<T>&);                         \
  template void attention_partial_backward<T>(                                                    \
      ops::Backend<T>&, const LayerDims&, const LayerTensors<T>&, const LayerTensors<T>&,         \
      const T*, T*, int, int, const AttentionActs<T>&, const T*, const T*, T*, T*);               \
  template void mlp_partial_backward<T>(ops::Backend<T>&, const LayerDims&,                       \
                                        const LayerTensors<T>&, const LayerTensors<T>&, const T*, \
                                        T*, int64_t, const MlpActs<T>&, T*, T*);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(double)
#undef STRATA_INSTANTIATE

}  // namespace strata
