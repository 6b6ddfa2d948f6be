// The op interface: one forward and one backward per op, independent of where
// the data lives. The model and the trainer call ops only through a Backend;
// the CPU backend (backends/cpu) implements it with OpenMP kernels and oneDNN,
// and the CUDA backend (backends/cuda) will implement the same calls with
// device pointers. Shapes, accumulation rules and layouts of every op are
// documented once, in backends/cpu/kernels.h.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"

namespace strata::ops {

using AdamWStep = cpu::AdamWStep;
using MatmulPrecision = cpu::MatmulPrecision;
template <typename T>
using VocabShard = cpu::VocabShard<T>;
constexpr int32_t kIgnoreIndex = cpu::kIgnoreIndex;

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory: zero-initialised allocations in the backend's memory space.
  virtual T* alloc(size_t n) = 0;
  virtual void free(T* p) = 0;
  virtual void zero(T* p, int64_t n) = 0;
  virtual void copy(T* dst, const T* src, int64_t n) = 0;
  virtual void to_host(T* host_dst, const T* src, int64_t n) = 0;
  virtual void from_host(T* dst, const T* host_src, int64_t n) = 0;

  // Matmul precision of the linear layers and the LM head (FP32, or BF16 with
  // fp32 accumulation and master weights). On the CPU this is process-wide.
  virtual void set_matmul_precision(MatmulPrecision p) = 0;

  // Vocab-parallel when V_local >= 0: this rank holds rows [v0, v0 + V_local).
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int C,
                                 int V, int64_t v0 = 0, int V_local = -1) = 0;
  virtual void embedding_backward(T* dwte, const int32_t* tokens, const T* dout, int64_t N, int C,
                                  int64_t v0 = 0, int V_local = -1) = 0;

  virtual void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C,
                               double eps) = 0;
  virtual void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                                int64_t N, int C) = 0;

  virtual void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC,
                              int OC) = 0;
  virtual void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w,
                               int64_t N, int IC, int OC, bool accumulate_dx) = 0;

  virtual void rope_forward(T* x, const T* cos, const T* sin, int B, int T_, int H, int D,
                            int64_t row_stride, int pos0) = 0;
  virtual void rope_backward(T* dx, const T* cos, const T* sin, int B, int T_, int H, int D,
                             int64_t row_stride, int pos0) = 0;

  virtual void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv,
                                 int D) = 0;
  virtual void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                                  int B, int T_, int Hq, int Hkv, int D) = 0;

  // Generation only (kernels.h: attention_cached_forward).
  virtual void attention_cached_forward(T* out, const T* q, int64_t q_stride, const T* kc,
                                        const T* vc, int n, int pos0, int Hq, int Hkv, int D,
                                        int max_len) = 0;

  virtual void swiglu_forward(T* h, const T* gateup, int64_t N, int F) = 0;
  virtual void swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) = 0;

  virtual void residual_forward(T* out, const T* a, const T* b, int64_t n) = 0;
  virtual void residual_backward(T* da, T* db, const T* dout, int64_t n) = 0;

  // With a shard: the vocab-parallel head (tensor parallelism), see VocabShard.
  virtual double head_ce_forward(T* xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid,
                                 const T* x, const T* wn, const T* wout, const int32_t* targets,
                                 int64_t N, int C, int V, double eps,
                                 const VocabShard<T>* shard = nullptr) = 0;
  virtual void head_ce_backward(T* dx, T* dwn, T* dwout, const T* x, const T* xn, const T* rstd,
                                const T* lse, const T* wn, const T* wout, const int32_t* targets,
                                int64_t N, int C, int V, double dloss,
                                const VocabShard<T>* shard = nullptr) = 0;
  virtual double head_ce_forward_backward(T* dx, T* dwn, T* dwout, T* xn, T* rstd,
                                          int64_t* n_valid, const T* x, const T* wn,
                                          const T* wout, const int32_t* targets, int64_t N, int C,
                                          int V, double eps, double dloss,
                                          const VocabShard<T>* shard = nullptr) = 0;
  virtual void head_logits(T* logits, T* xn_scratch, const T* x, const T* wn, const T* wout,
                           int64_t N, int C, int V, double eps) = 0;

  virtual double mse_forward(const T* a, const T* b, int64_t n) = 0;
  virtual void mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, double dloss) = 0;

  virtual void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWStep& s) = 0;
  virtual double sum_squares(const T* x, int64_t n) = 0;
  virtual void scale_inplace(T* x, int64_t n, double s) = 0;
};

// The CPU backend (float: the fast path; double: gradient checks).
template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend();

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
