// The op interface: one forward and one backward per op, independent of where
// the data lives. The model, the optimizer, evaluation and generation call ops
// only through a Backend; backends/cpu implements it with OpenMP kernels and
// oneDNN, and a CUDA backend implements the same calls with device pointers.
// This file is the contract: shapes, layouts, what is saved for backward and
// the accumulation rule of every gradient. It includes no backend.
//
// Conventions
//   N = B*T tokens, C = hidden size; rows are row-major and contiguous unless
//   a leading dimension says otherwise.
//   Parameter gradients always ACCUMULATE (+=), so micro-batches and shared
//   weights (tied embeddings, the head shared by early exits) just add up.
//   Activation gradients are "=" (overwrite) or "+=" as stated per op.
//   A null gradient pointer means "not needed" (frozen parameter): that part of
//   the backward is skipped.
//   Pointers are backend memory unless the op says "host" (token ids and
//   targets are host memory).
//   Calls are ordered on the backend's stream; results are visible to the host
//   after synchronize() (a no-op on the CPU). Ops that return a scalar to the
//   host (the cross-entropy's loss, mse_forward) synchronize: one read per
//   loss term and step. Reductions that only feed a later decision (the
//   squares of the gradients for the global norm) add into scalar
//   accumulators in backend memory instead, read once per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/memory_info.h"

#include "ops/types.h"

namespace strata::ops {

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ------------------------------------------------------------ memory, stream
  // Zero-initialised allocations in the backend's memory space.
  virtual T* alloc(size_t n) = 0;
  virtual void free(T* p) = 0;
  virtual void zero(T* p, int64_t n) = 0;
  virtual void copy(T* dst, const T* src, int64_t n) = 0;
  virtual void to_host(T* host_dst, const T* src, int64_t n) = 0;
  virtual void from_host(T* dst, const T* host_src, int64_t n) = 0;
  // Whether backend memory is host memory (the CPU backend): callers may then
  // read it directly instead of staging through to_host.
  virtual bool is_host() const = 0;
  // The stream ops are ordered on (cudaStream_t on CUDA; null on the CPU),
  // for communicators that must order their work after it.
  virtual void* stream() const = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() = 0;
  // Scalar accumulators: n doubles in backend memory (zeroed), added to on the
  // stream by reductions such as sum_squares; read_scalars synchronizes and
  // copies them to the host, so a step pays one round trip for all of them.
  virtual double* alloc_scalars(int n) = 0;
  virtual void free_scalars(double* p) = 0;
  virtual void zero_scalars(double* p, int n) = 0;
  virtual void read_scalars(double* host_dst, const double* p, int n) = 0;

  // ------------------------------------------------------------------ matmuls
  // Matmul precision of the linear layers and the LM head (FP32, or BF16 with
  // fp32 accumulation and master weights). On the CPU this is process-wide.
  virtual void set_matmul_precision(MatmulPrecision p) = 0;
  // Whether bf16 matmuls are native here (precision "auto" picks bf16 then).
  virtual bool native_bf16() const = 0;
  // One line on how matmuls of this precision run, for logs and `strata info`.
  virtual std::string matmul_path(MatmulPrecision p) const = 0;
  // Generation brackets its passes with freeze_weights(true) ... (false): the
  // weights do not change in between, so a backend may keep converted copies
  // of them (the CPU keeps bf16 copies for few-row bf16 matmuls, halving the
  // bytes a decode step reads). Both calls drop any such copies.
  virtual void freeze_weights(bool frozen) { (void)frozen; }

  // --------------------------------------------------------------- embedding
  // out[N,C] = wte[tokens[n], :] (tokens: host). Throws strata::Error if a
  // token is outside [0,V). Vocab-parallel when V_local >= 0: wte holds rows
  // [v0, v0 + V_local) of the V-row table; rows of other tokens are zero (the
  // ranks' outputs sum to the full lookup).
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int C,
                                 int V, int64_t v0 = 0, int V_local = -1) = 0;
  // dwte[V,C] += sum over n with tokens[n]==v of dout[n,:] (the shard's tokens).
  virtual void embedding_backward(T* dwte, const int32_t* tokens, const T* dout, int64_t N, int C,
                                  int64_t v0 = 0, int V_local = -1) = 0;

  // ------------------------------------------------------------------ RMSNorm
  // out[N,C] = x * rstd * w,  rstd[N] = 1/sqrt(mean(x^2) + eps). Saves rstd.
  virtual void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C,
                               double eps) = 0;
  // dx[N,C] += ...,  dw[C] += sum_n dout*x*rstd.
  virtual void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                                int64_t N, int C) = 0;

  // ------------------------------------------------------------------- linear
  // out[N,OC] = x[N,IC] * w[OC,IC]^T (+ bias[OC]); bias may be null. w may be
  // several weights stored back to back (fused QKV, fused gate|up). ld: leading
  // dimensions for views into larger matrices (e.g. one shard's columns of a
  // full weight); default compact.
  virtual void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC,
                              int OC, const LinearLd& ld = {}) = 0;
  // dx[N,IC] = dout*w (+= when accumulate_dx); dw[OC,IC] += dout^T*x;
  // dbias[OC] += column sums of dout. Any of dx, dw, dbias may be null; dx
  // shares x's leading dimension, dw w's, dout out's.
  virtual void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w,
                               int64_t N, int IC, int OC, bool accumulate_dx,
                               const LinearLd& ld = {}) = 0;

  // -------------------------------------------------------------- bias, axpby
  // out[n, j] += bias[j] over N rows of OC (rows ld apart; 0: OC).
  virtual void bias_add_forward(T* out, const T* bias, int64_t N, int OC, int64_t ld = 0) = 0;
  // dbias[j] += sum_n dout[n, j].
  virtual void bias_add_backward(T* dbias, const T* dout, int64_t N, int OC, int64_t ld = 0) = 0;
  // out[n] = a x[n] + b y[n] (out may alias x or y).
  virtual void axpby_forward(T* out, const T* x, const T* y, int64_t n, double a, double b) = 0;
  // dx += a dout, dy += b dout (either may be null; neither may alias dout).
  virtual void axpby_backward(T* dx, T* dy, const T* dout, int64_t n, double a, double b) = 0;

  // --------------------------------------------------------------------- RoPE
  // Rotary tables, rotate-half (Hugging Face) layout: cos/sin[max_pos, D/2]
  // with angle(p, i) = p * inv_freq[i] (inv_freq: host, D/2 values).
  virtual void rope_table(T* cos, T* sin, int max_pos, int D, const double* inv_freq) = 0;
  // In place on x viewed as B*T rows of `row_stride` elements; the first H
  // heads of D elements of each row are rotated; row (b,t) has position
  // pos0 + t:  y[i] = x[i] cos - x[i+D/2] sin,  y[i+D/2] = x[i+D/2] cos + x[i] sin.
  virtual void rope_forward(T* x, const T* cos, const T* sin, int B, int T_, int H, int D,
                            int64_t row_stride, int pos0) = 0;
  // In place: dx = R^T dy (rotation by the negative angle).
  virtual void rope_backward(T* dx, const T* cos, const T* sin, int B, int T_, int H, int D,
                             int64_t row_stride, int pos0) = 0;

  // ---------------------------------------------------------------- attention
  // Causal grouped-query attention. qkv[B,T,(Hq+2*Hkv)*D]: per token, Hq query
  // heads, Hkv key heads, Hkv value heads (post-RoPE q and k); query head h
  // reads kv head h / (Hq/Hkv).
  //   out[B,T,Hq*D] = softmax(q k^T / sqrt(D), causal) v
  //   lse[B,Hq,T]   = log sum_j exp(q.k_j / sqrt(D))  (saved for backward)
  virtual void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv,
                                 int D) = 0;
  // dqkv[B,T,(Hq+2*Hkv)*D] = gradients of q, k and v (overwritten).
  virtual void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                                  int B, int T_, int Hq, int Hkv, int D) = 0;
  // Generation: n new queries of one sequence at positions pos0 .. pos0+n-1
  // attend over its KV cache kc, vc [Hkv, max_len, D] (post-RoPE keys), which
  // already holds positions 0 .. pos0+n-1. Query i of head h is
  // q[i * q_stride + h * D ...]; out[n, Hq*D]. Causal; no backward.
  virtual void attention_cached_forward(T* out, const T* q, int64_t q_stride, const T* kc,
                                        const T* vc, int n, int pos0, int Hq, int Hkv, int D,
                                        int max_len) = 0;

  // ------------------------------------------------------------------- SwiGLU
  // gateup[N,2F] = [gate | up]; h[N,F] = silu(gate) * up.
  virtual void swiglu_forward(T* h, const T* gateup, int64_t N, int F) = 0;
  // dgateup[N,2F] = gradients of gate and up (overwritten).
  virtual void swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) = 0;

  // ----------------------------------------------------------------- residual
  // out[n] = a[n] + b[n]; out may alias a or b.
  virtual void residual_forward(T* out, const T* a, const T* b, int64_t n) = 0;
  // da += dout, db += dout (either may be null).
  virtual void residual_backward(T* da, T* db, const T* dout, int64_t n) = 0;

  // ---------------------------------------------------- head + cross-entropy
  // Fused final RMSNorm + LM head + cross-entropy over N tokens, in chunks of
  // rows so the [N,V] logits are never materialised (targets: host).
  //   xn[N,C], rstd[N] = rmsnorm(x; wn) (saved for backward)
  //   logits = xn * wout[V,C]^T;  lse[N] = logsumexp(logits) (saved)
  //   returns the sum over tokens with targets[n] != kIgnoreIndex of
  //   lse - logit[target]; *n_valid (host) = their count; token_nll[N]
  //   (optional) = per-token loss (0 if ignored).
  // With a shard: the vocab-parallel head (tensor parallelism), see VocabShard.
  virtual double head_ce_forward(T* xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, const T* x,
                                 const T* wn, const T* wout, const int32_t* targets, int64_t N,
                                 int C, int V, double eps,
                                 const VocabShard<T>* shard = nullptr) = 0;
  virtual void head_ce_backward(T* dx, T* dwn, T* dwout, const T* x, const T* xn, const T* rstd,
                                const T* lse, const T* wn, const T* wout, const int32_t* targets,
                                int64_t N, int C, int V, double dloss,
                                const VocabShard<T>* shard = nullptr) = 0;
  // Forward and backward in one pass over the chunks (the training path: one
  // logits GEMM instead of two). Same outputs as the two calls.
  virtual double head_ce_forward_backward(T* dx, T* dwn, T* dwout, T* xn, T* rstd, int64_t* n_valid,
                                          const T* x, const T* wn, const T* wout,
                                          const int32_t* targets, int64_t N, int C, int V,
                                          double eps, double dloss,
                                          const VocabShard<T>* shard = nullptr) = 0;
  // Logits for evaluation and generation: logits[N,V] = rmsnorm(x; wn) * wout^T.
  virtual void head_logits(T* logits, T* xn_scratch, const T* x, const T* wn, const T* wout,
                           int64_t N, int C, int V, double eps) = 0;

  // ---------------------------------------------------------------------- MSE
  // mean((a - b)^2) over n elements (PyTorch MSELoss, reduction="mean").
  virtual double mse_forward(const T* a, const T* b, int64_t n) = 0;
  // da += dloss * 2 (a - b) / n;  db -= the same (either may be null).
  virtual void mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, double dloss) = 0;

  // -------------------------------------------------------- optimizer, norms
  // Decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW:
  //   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  //   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  virtual void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWStep& s) = 0;
  // *acc += sum of squares of x[n] (acc: a scalar accumulator; accumulated in
  // double, deterministic for a thread count), and in-place scaling, for
  // global-norm gradient clipping.
  virtual void sum_squares(double* acc, const T* x, int64_t n) = 0;
  virtual void scale_inplace(T* x, int64_t n, double s) = 0;
};

// The one backend factory (backends/factory.cpp), by device name:
//   "cpu"   the CPU kernels (float: the fast path; double: gradient checks);
//   "cuda"  the CUDA kernels and cuBLASLt on the current GPU (CUDA builds);
//   "simt"  the same CUDA kernels on the CPU SIMT executor (tests, no GPU);
//   "auto"  cuda where a GPU is visible, else cpu.
// Throws strata::Error naming the devices this build has.
template <typename T>
std::unique_ptr<Backend<T>> make_backend(const std::string& name = "cpu");
// "auto" resolved to the device make_backend would pick; other names as given.
std::string resolve_device(const std::string& name);
// The device names this build accepts, for help and errors.
std::string backend_names();
// The GPU of this process (device "cuda"): its rank on the node (Open MPI,
// Slurm, MPICH, PMIx variables) modulo the visible devices, so one rank per
// GPU needs no setting; 0 alone or without CUDA.
int local_cuda_device();
// One line for logs: "device cpu (auto: no CUDA device visible)".
std::string device_choice(const std::string& requested);
// The memory left to allocate on a resolved device: this process's GPU's free
// memory for "cuda" (source "GPU <n> free memory"), the host's otherwise
// (host_memory_available, core/memory_info.h). STRATA_MEMORY_LIMIT overrides both.
MemoryLimit memory_available(const std::string& device);

// RAII allocation in a backend's memory space.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend<T>* be, size_t n) : be_(be), n_(n), p_(n ? be->alloc(n) : nullptr) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      n_ = o.n_;
      p_ = o.p_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release() {
    if (p_) be_->free(p_);
    p_ = nullptr;
  }
  Backend<T>* be_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace strata::ops
