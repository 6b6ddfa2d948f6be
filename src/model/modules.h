// The two modules of a decoder layer as partial sums: attention (input norm,
// fused q|k|v, RoPE, attention, o_proj) and MLP (post-attention norm, fused
// gate|up, SwiGLU, down_proj). Under tensor parallelism each rank holds its
// heads and its slice of the MLP, and what a module returns is this rank's
// partial sum of the module's output: no reduction, no o_proj bias, no
// residual. Those belong to the executor and the layer kind (model/unit.h),
// which is what lets Ladder, SPD and Layer Parallelism move them.
//
// Training, evaluation and generation run these same functions: the attention
// core (what happens between q|k|v and o_proj) is the causal attention over
// the sequence for training, and the KV-cache attention for generation.
#pragma once

#include <cstdint>
#include <functional>

#include "model/config.h"
#include "model/params.h"
#include "ops/backend.h"

namespace strata {

// This rank's sizes of a layer (Hq = Hkv = F = 0 where it holds none of the
// layer: its partial outputs and input gradients are zero).
struct LayerDims {
  int C = 0, D = 0, Hq = 0, Hkv = 0, F = 0;
  double eps = 0;
  int Q() const { return Hq * D; }
  int QKV() const { return (Hq + 2 * Hkv) * D; }
  bool empty() const { return Hq == 0; }
  // The layer's heads and MLP columns cut into `parts`, of which this rank
  // holds one (held = false: none).
  static LayerDims of(const LlamaConfig& c, int parts, bool held = true);
};

// Pointers to one layer's tensors (parameters, or their gradients: null where
// a tensor is frozen or absent).
template <typename T>
struct LayerTensors {
  T *input_norm = nullptr, *qkv = nullptr, *qkv_bias = nullptr, *o = nullptr, *o_bias = nullptr,
    *post_norm = nullptr, *gateup = nullptr, *down = nullptr;
};

// What the attention module keeps for its backward (training) or uses as
// scratch (generation): ln[N,C], rstd[N], qkv[N,QKV], att[N,Q] and, for the
// sequence attention, lse[B,Hq,T]. Activations are ops::Act (fp32 or bf16
// storage, ops/dtype.h); the norm and softmax statistics stay T.
template <typename T>
struct AttentionActs {  // (initialise by name: an Act and a T* convert into each other)
  ops::Act<T> ln;
  T* rstd = nullptr;
  ops::Act<T> qkv, att;
  T* lse = nullptr;
};
// The MLP's: ln[N,C], rstd[N], gateup[N,2F], h[N,F].
template <typename T>
struct MlpActs {  // (by name, as AttentionActs)
  ops::Act<T> ln;
  T* rstd = nullptr;
  ops::Act<T> gateup, h;
};

// One virtual rank's MLP state in an SPD block (training: kept for backward):
// h[N,C] = its MLP input x + P_j (+ o bias), ln[N,C], rstd[N], gateup[N,2F/V],
// act[N,F/V].
template <typename T>
struct SpdActs {
  ops::Act<T> h, ln;
  T* rstd = nullptr;
  ops::Act<T> gateup, act;
};

// Turns qkv[N, QKV] into att[N, Q]: RoPE on q and k, then attention.
template <typename T>
using AttentionCore = std::function<void(ops::Act<T> qkv, ops::Act<T> att)>;

// out[N, C] = this rank's partial attention output of x[N, C].
template <typename T>
void attention_partial(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                       ops::ActIn<T> x, ops::Act<T> out, int64_t N, const AttentionActs<T>& a,
                       const AttentionCore<T>& core);
// out[N, C] = this rank's partial MLP output of x[N, C].
template <typename T>
void mlp_partial(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w, ops::ActIn<T> x,
                 ops::Act<T> out, int64_t N, const MlpActs<T>& a);

// SPD (Sync-Point Drop) block without its attention all-reduce, for V virtual
// ranks on this rank (the block's degree g over tp: V = g / tp), each holding
// 1/V of this rank's heads and MLP columns (views of the shards, no copies):
//   P_j = attention output of virtual rank j's heads (its o_proj columns)
//   h_j = x + P_j (+ o bias),  Z_j = MLP_j(norm(h_j)) (its MLP columns)
//   out = sum_j (Z_j + P_j)
// The caller adds the o bias once and x after reducing out over the tp group.
// `acts(j)`: virtual rank j's MLP state; `p` scratch [N, C].
template <typename T>
void spd_block_partial(ops::Backend<T>& be, const LayerDims& d, int V, const LayerTensors<T>& w,
                       ops::ActIn<T> x, ops::Act<T> out, int64_t N, const AttentionActs<T>& a,
                       const std::function<SpdActs<T>(int)>& acts, ops::Act<T> p,
                       const AttentionCore<T>& core);
// Its backward from dout[N, C] (replicated): weight gradients accumulate into
// g, except the MLP norm weights' and the o bias's, which accumulate into
// dnorm[C] and dbias[C]; dx[N, C] += the gradient through the MLP inputs;
// d_ln[N, C] = the gradient of the attention's normed input. All of these are
// this rank's part only (its virtual ranks' heads and MLP inputs): the caller
// sums them over the tp group.
// Scratch: dp, dh [N, C], d_att [N, Q], d_qkv [N, QKV], d_act [N, F/V],
// d_gateup [N, 2F/V]. dx must not alias dout.
template <typename T>
void spd_block_partial_backward(ops::Backend<T>& be, const LayerDims& d, int V,
                                const LayerTensors<T>& w, const LayerTensors<T>& g, T* dnorm,
                                T* dbias, ops::ActIn<T> dout, ops::Act<T> dx, ops::Act<T> d_ln,
                                int B, int seq, const AttentionActs<T>& a,
                                const std::function<SpdActs<T>(int)>& acts, const T* rope_cos,
                                const T* rope_sin, ops::Act<T> dp, ops::Act<T> dh,
                                ops::Act<T> d_att, ops::Act<T> d_qkv, ops::Act<T> d_act,
                                ops::Act<T> d_gateup);

// Backward of attention_partial up to its input norm: from dout[N, C] (the
// gradient of the partial output, replicated over tp) to d_ln[N, C], this
// rank's partial gradient of the normed input (overwritten); weight gradients
// accumulate into g. The causal sequence attention (training only).
template <typename T>
void attention_partial_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                                const LayerTensors<T>& g, ops::ActIn<T> dout, ops::Act<T> d_ln,
                                int B, int seq, const AttentionActs<T>& a, const T* rope_cos,
                                const T* rope_sin, ops::Act<T> d_att, ops::Act<T> d_qkv);
template <typename T>
void mlp_partial_backward(ops::Backend<T>& be, const LayerDims& d, const LayerTensors<T>& w,
                          const LayerTensors<T>& g, ops::ActIn<T> dout, ops::Act<T> d_ln, int64_t N,
                          const MlpActs<T>& a, ops::Act<T> d_h, ops::Act<T> d_gateup);

}  // namespace strata
