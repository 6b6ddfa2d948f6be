// CPU kernels: one forward and one hand-written backward per op, one file per
// op (backends/cpu/<op>.cpp), behind ops::Backend (cpu_backend.cpp). The
// contract (shapes, layouts, accumulation rules, null gradients) is
// ops/backend.h; the comments here repeat the shapes for readers of the CPU
// code and add what is CPU-specific (determinism, threads). Every kernel is a
// template instantiated for float (the fast path) and double (used by the
// finite-difference gradient checks in tests/). Threads: OpenMP, one pool.
#pragma once

#include <cstdint>
#include <functional>

#include "ops/types.h"

namespace strata::cpu {

// The contract's types (ops/types.h).
using ops::AdamWStep;
using ops::clip_coefficient;
using ops::kIgnoreIndex;
using ops::LinearLd;
using ops::VocabShard;

// ---------------------------------------------------------------- embedding.cpp
// out[N,C] = wte[tokens[n], :]. Throws strata::Error if a token is outside [0,V).
// Vocab-parallel (tensor parallelism): wte holds rows [v0, v0 + V_local) of
// the V-row table; rows of other tokens are zero (the ranks' outputs sum to
// the full lookup). V_local < 0 means the whole table.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int C, int V,
                       int64_t v0 = 0, int V_local = -1);
// dwte[V,C] += sum over n with tokens[n]==v of dout[n,:] (for the shard's
// tokens only). Deterministic: threads own disjoint channel ranges.
template <typename T>
void embedding_backward(T* dwte, const int32_t* tokens, const T* dout, int64_t N, int C,
                        int64_t v0 = 0, int V_local = -1);

// ------------------------------------------------------------------ rmsnorm.cpp
// out[N,C] = x * rstd * w,  rstd[N] = 1/sqrt(mean(x^2) + eps). Saves rstd.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C, double eps);
// dx[N,C] += ...,  dw[C] += sum_n dout*x*rstd.
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int64_t N,
                      int C);

// ------------------------------------------------------------------- linear.cpp
// out[N,OC] = x[N,IC] * w[OC,IC]^T (+ bias[OC]); bias may be null.
// w may be several weights stored back to back (fused QKV, fused gate/up).
// ld: leading dimensions for views into larger matrices (default compact).
template <typename T>
void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC, int OC,
                    const LinearLd& ld = {});
// dx[N,IC] = dout*w (or += when accumulate_dx); dw[OC,IC] += dout^T*x;
// dbias[OC] += column sums of dout. Any of dx, dw, dbias may be null. dx and x
// share ld.x, dw and w ld.w, dout ld.out.
template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N,
                     int IC, int OC, bool accumulate_dx, const LinearLd& ld = {});

// --------------------------------------------------------------------- bias.cpp
// out[n, j] += bias[j] for N rows of OC (rows ld apart; 0: OC).
template <typename T>
void bias_add_forward(T* out, const T* bias, int64_t N, int OC, int64_t ld = 0);
// dbias[j] += sum_n dout[n, j] (per-thread partials combined in thread order).
template <typename T>
void bias_add_backward(T* dbias, const T* dout, int64_t N, int OC, int64_t ld = 0);

// -------------------------------------------------------------------- axpby.cpp
// out[n] = a x[n] + b y[n] (out may alias x or y).
template <typename T>
void axpby_forward(T* out, const T* x, const T* y, int64_t n, double a, double b);
// dx += a dout, dy += b dout (either may be null; neither may alias dout).
template <typename T>
void axpby_backward(T* dx, T* dy, const T* dout, int64_t n, double a, double b);

// --------------------------------------------------------------------- rope.cpp
// Rotary tables, rotate-half (Hugging Face) layout: cos/sin[max_pos, D/2] with
// angle(p, i) = p * inv_freq[i]. The first form uses inv_freq[i] =
// theta^(-2i/D); the second takes the D/2 frequencies (e.g. Llama-3 scaled,
// see model/config.h).
template <typename T>
void rope_table(T* cos, T* sin, int max_pos, int D, double theta);
template <typename T>
void rope_table(T* cos, T* sin, int max_pos, int D, const double* inv_freq);
// In place on x viewed as B*T rows of `row_stride` elements; the first H heads
// of D elements of each row are rotated; row (b,t) has position pos0 + t:
//   y[i]     = x[i] cos - x[i+D/2] sin,   y[i+D/2] = x[i+D/2] cos + x[i] sin.
template <typename T>
void rope_forward(T* x, const T* cos, const T* sin, int B, int T_, int H, int D, int64_t row_stride,
                  int pos0);
// In place: dx = R^T dy (rotation by the negative angle).
template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int B, int T_, int H, int D,
                   int64_t row_stride, int pos0);

// ---------------------------------------------------------------- attention.cpp
// Causal grouped-query attention, memory-efficient: scores are computed in
// tiles of query rows and never stored; only the per-row log-sum-exp is kept
// for backward, which recomputes the probabilities tile by tile.
//   qkv[B,T,(Hq+2*Hkv)*D]: per token, Hq query heads, Hkv key heads, Hkv value
//   heads (post-RoPE q and k). Query head h reads kv head h / (Hq/Hkv).
//   out[B,T,Hq*D] = softmax(q k^T / sqrt(D), causal) v
//   lse[B,Hq,T]   = log sum_j exp(q.k_j / sqrt(D))
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv, int D);
// dqkv[B,T,(Hq+2*Hkv)*D] = gradients of q, k and v (overwritten).
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int T_, int Hq, int Hkv, int D);

// --------------------------------------------------------- attention_cached.cpp
// Generation: n new queries of one sequence at positions pos0 .. pos0+n-1
// attend over its KV cache kc, vc [Hkv, max_len, D] (post-RoPE keys), which
// already holds positions 0 .. pos0+n-1 (the new ones included). Query i of
// head h is q[i * q_stride + h * D ...]; out[n, Hq*D]. Causal. Inference only
// (no backward).
template <typename T>
void attention_cached_forward(T* out, const T* q, int64_t q_stride, const T* kc, const T* vc, int n,
                              int pos0, int Hq, int Hkv, int D, int max_len);

// ------------------------------------------------------------------- swiglu.cpp
// gateup[N,2F] = [gate | up]; h[N,F] = silu(gate) * up.
template <typename T>
void swiglu_forward(T* h, const T* gateup, int64_t N, int F);
// dgateup[N,2F] = gradients of gate and up (overwritten).
template <typename T>
void swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F);

// ----------------------------------------------------------------- residual.cpp
// out[n] = a[n] + b[n]; out may alias a or b.
template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);
// da += dout, db += dout (either may be null).
template <typename T>
void residual_backward(T* da, T* db, const T* dout, int64_t n);

// ------------------------------------------------------------------ head_ce.cpp
// With a VocabShard (ops/types.h): the vocab-parallel head.

// Fused final RMSNorm + LM head + cross-entropy over N tokens, processed in
// chunks of rows so the [N,V] logits are never materialised.
//   xn[N,C], rstd[N] = rmsnorm(x; wn) (saved for backward)
//   logits = xn * wout[V,C]^T;  lse[N] = logsumexp(logits) (saved)
//   returns sum over tokens with targets[n] != kIgnoreIndex of lse - logit[target];
//   *n_valid = their count; token_nll[N] (optional) = per-token loss (0 if ignored).
template <typename T>
double head_ce_forward(T* xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, const T* x,
                       const T* wn, const T* wout, const int32_t* targets, int64_t N, int C, int V,
                       double eps, const VocabShard<T>* shard = nullptr);
// Backward of (dloss * summed loss): recomputes logits chunk by chunk.
// dx[N,C] +=, dwn[C] +=, dwout[V,C] +=.
template <typename T>
void head_ce_backward(T* dx, T* dwn, T* dwout, const T* x, const T* xn, const T* rstd, const T* lse,
                      const T* wn, const T* wout, const int32_t* targets, int64_t N, int C, int V,
                      double dloss, const VocabShard<T>* shard = nullptr);
// Forward and backward in one pass over the chunks (the training path: one
// logits GEMM instead of two). Same outputs as the two calls above.
template <typename T>
double head_ce_forward_backward(T* dx, T* dwn, T* dwout, T* xn, T* rstd, int64_t* n_valid,
                                const T* x, const T* wn, const T* wout, const int32_t* targets,
                                int64_t N, int C, int V, double eps, double dloss,
                                const VocabShard<T>* shard = nullptr);
// Rows per chunk of the fused head (0: automatic, about 64 MiB of logits).
// For tests that compare chunked and unchunked results, and for tuning.
void set_head_ce_chunk_rows(int64_t rows);
// Logits for evaluation and generation: logits[N,V] = rmsnorm(x; wn) * wout^T.
template <typename T>
void head_logits(T* logits, T* xn_scratch, const T* x, const T* wn, const T* wout, int64_t N, int C,
                 int V, double eps);

// ---------------------------------------------------------------------- mse.cpp
// mean((a - b)^2) over n elements (PyTorch MSELoss, reduction="mean").
template <typename T>
double mse_forward(const T* a, const T* b, int64_t n);
// da += dloss * 2 (a - b) / n;  db -= the same (either may be null).
template <typename T>
void mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, double dloss);

// -------------------------------------------------------------------- adamw.cpp
// Decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWStep& s);

// ---------------------------------------------------------------- grad_norm.cpp
// Sum of squares (accumulated in double), and in-place scaling, for global-norm
// gradient clipping.
template <typename T>
double sum_squares(const T* x, int64_t n);
template <typename T>
void scale_inplace(T* x, int64_t n, double s);

}  // namespace strata::cpu
