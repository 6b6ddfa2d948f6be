// KernelBackend: ops::Backend implemented with the kernels of
// backends/cuda/kernels/ and a GemmEngine. The same source compiles twice:
// with nvcc into the CUDA backend ("cuda": device memory, one stream,
// cuBLASLt) and with the host compiler into the SIMT backend ("simt": host
// memory that the model must treat as device memory, the CPU SIMT executor,
// the CPU GEMM). Include it from exactly one translation unit per build.
//
// Host synchronisation happens only where the interface says: to_host,
// read_scalars, synchronize, and the ops returning a loss to the host
// (head_ce_forward*, mse_forward). Host inputs (token ids, targets, RoPE
// frequencies) are copied to stream-ordered scratch first.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/gemm_engine.h"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/rows.cuh"
#include "core/error.h"
#include "ops/backend.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
class KernelBackend final : public ops::Backend<T> {
 public:
  // `owner` keeps what the stream belongs to alive (released last).
  KernelBackend(std::string name, void* stream, std::unique_ptr<GemmEngine<T>> gemm,
                std::shared_ptr<void> owner = {})
      : owner_(std::move(owner)), name_(std::move(name)), stream_(stream), gemm_(std::move(gemm)) {}
  ~KernelBackend() override {
    for (Scratch& s : scratch_) gpu::free_async(s.p, stream_);
    if (!gpu::kSimulated) gpu::sync(stream_);
  }

  const char* name() const override { return name_.c_str(); }
  GemmEngine<T>& gemm_engine() { return *gemm_; }

  // ---------------------------------------------------------- memory, stream
  T* alloc(size_t n) override {
    T* p = static_cast<T*>(gpu::malloc_device(n * sizeof(T)));
    gpu::zero_async(p, n * sizeof(T), stream_);
    return p;
  }
  void free(T* p) override {
    gpu::sync(stream_);
    gpu::free_device(p);
  }
  void zero(T* p, int64_t n) override { gpu::zero_async(p, size_t(n) * sizeof(T), stream_); }
  void copy(T* dst, const T* src, int64_t n) override {
    gpu::copy_async(dst, src, size_t(n) * sizeof(T), stream_);
  }
  void to_host(T* dst, const T* src, int64_t n) override {
    gpu::copy_async(dst, src, size_t(n) * sizeof(T), stream_);
    gpu::sync(stream_);
  }
  void from_host(T* dst, const T* src, int64_t n) override {
    gpu::copy_async(dst, src, size_t(n) * sizeof(T), stream_);
  }
  bool is_host() const override { return false; }
  void* stream() const override { return stream_; }
  void synchronize() override { gpu::sync(stream_); }
  double* alloc_scalars(int n) override {
    auto* p = static_cast<double*>(gpu::malloc_device(size_t(n) * sizeof(double)));
    gpu::zero_async(p, size_t(n) * sizeof(double), stream_);
    return p;
  }
  void free_scalars(double* p) override {
    gpu::sync(stream_);
    gpu::free_device(p);
  }
  void zero_scalars(double* p, int n) override {
    gpu::zero_async(p, size_t(n) * sizeof(double), stream_);
  }
  void read_scalars(double* dst, const double* p, int n) override {
    gpu::copy_async(dst, p, size_t(n) * sizeof(double), stream_);
    gpu::sync(stream_);
  }

  // ----------------------------------------------------------------- matmuls
  void set_matmul_precision(ops::MatmulPrecision p) override { gemm_->set_precision(p); }
  bool native_bf16() const override { return gemm_->native_bf16(); }
  std::string matmul_path(ops::MatmulPrecision p) const override { return gemm_->path(p); }

  // --------------------------------------------------------------- embedding
  void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int C, int V,
                         int64_t v0, int V_local) override {
    for (int64_t n = 0; n < N; ++n)
      STRATA_CHECK(tokens[n] >= 0 && tokens[n] < V, "token id ", tokens[n], " at position ", n,
                   " is outside the vocabulary [0, ", V, ")");
    if (N == 0) return;
    const int32_t* dt = upload_ints(kTokens, tokens, N);
    STRATA_LAUNCH(k_embedding<T>, blocks_for(N, 1, 8192), row_threads(C), 0, stream_, out, dt, wte,
                  N, C, v0, V_local < 0 ? V : V_local);
  }
  void embedding_backward(T* dwte, const int32_t* tokens, const T* dout, int64_t N, int C,
                          int64_t v0, int V_local) override {
    // Group the positions by row on the host (stable: positions ascending).
    std::vector<std::pair<int64_t, int32_t>> rp;
    rp.reserve(size_t(N));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = int64_t(tokens[n]) - v0;
      if (V_local >= 0 && (row < 0 || row >= V_local)) continue;
      rp.emplace_back(row, int32_t(n));
    }
    if (rp.empty()) return;
    std::stable_sort(rp.begin(), rp.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int32_t> host;  // rows | start (unique + 1) | positions
    std::vector<int32_t> start;
    for (size_t k = 0; k < rp.size(); ++k)
      if (k == 0 || rp[k].first != rp[k - 1].first) {
        host.push_back(int32_t(rp[k].first));
        start.push_back(int32_t(k));
      }
    const int unique = int(host.size());
    start.push_back(int32_t(rp.size()));
    host.insert(host.end(), start.begin(), start.end());
    for (const auto& e : rp) host.push_back(e.second);
    const int32_t* d = upload_ints(kTokens, host.data(), int64_t(host.size()));
    STRATA_LAUNCH(k_embedding_backward<T>, blocks_for(unique, 1, 8192), row_threads(C), 0, stream_,
                  dwte, d, d + unique, d + 2 * unique + 1, dout, unique, C);
  }

  // ----------------------------------------------------------------- RMSNorm
  void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int C,
                       double eps) override {
    if (N == 0) return;
    STRATA_LAUNCH(k_rmsnorm<T>, blocks_for(N, 1, 8192), row_threads(C), 0, stream_, out, rstd, x, w,
                  N, C, T(eps));
  }
  void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                        int64_t N, int C) override {
    if (N == 0) return;
    if (dx)
      STRATA_LAUNCH(k_rmsnorm_backward_dx<T>, blocks_for(N, 1, 8192), row_threads(C), 0, stream_,
                    dx, dout, x, w, rstd, N, C);
    if (dw)
      STRATA_LAUNCH(k_rmsnorm_backward_dw<T>, blocks_for(C, 128), 128, 0, stream_, dw, dout, x,
                    rstd, N, C);
  }

  // ------------------------------------------------------------------ linear
  void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC, int OC,
                      const ops::LinearLd& ld) override {
    const int64_t lx = ld.x ? ld.x : IC, lw = ld.w ? ld.w : IC, lo = ld.out ? ld.out : OC;
    if (N == 0) return;
    gemm_->gemm(false, true, N, OC, IC, T(1), x, lx, w, lw, T(0), out, lo);
    if (bias) bias_add_forward(out, bias, N, OC, lo);
  }
  void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N,
                       int IC, int OC, bool accumulate_dx, const ops::LinearLd& ld) override {
    const int64_t lx = ld.x ? ld.x : IC, lw = ld.w ? ld.w : IC, lo = ld.out ? ld.out : OC;
    if (N == 0) return;
    if (dx) gemm_->gemm(false, false, N, IC, OC, T(1), dout, lo, w, lw, T(accumulate_dx), dx, lx);
    if (dw) gemm_->gemm(true, false, OC, IC, N, T(1), dout, lo, x, lx, T(1), dw, lw);
    if (dbias) bias_add_backward(dbias, dout, N, OC, lo);
  }

  // ------------------------------------------------------------- bias, axpby
  void bias_add_forward(T* out, const T* bias, int64_t N, int OC, int64_t ld) override {
    if (N == 0) return;
    STRATA_LAUNCH(k_bias_add<T>, blocks_for(N * OC, 256), 256, 0, stream_, out, bias, N, OC,
                  ld ? ld : OC);
  }
  void bias_add_backward(T* dbias, const T* dout, int64_t N, int OC, int64_t ld) override {
    if (N == 0) return;
    STRATA_LAUNCH(k_column_sums<T>, blocks_for(OC, 128), 128, 0, stream_, dbias, dout, N, OC,
                  ld ? ld : OC);
  }
  void axpby_forward(T* out, const T* x, const T* y, int64_t n, double a, double b) override {
    if (n == 0) return;
    STRATA_LAUNCH(k_axpby<T>, blocks_for(n, 256), 256, 0, stream_, out, x, y, n, T(a), T(b));
  }
  void axpby_backward(T* dx, T* dy, const T* dout, int64_t n, double a, double b) override {
    if (n == 0 || (!dx && !dy)) return;
    STRATA_LAUNCH(k_axpby_backward<T>, blocks_for(n, 256), 256, 0, stream_, dx, dy, dout, n, T(a),
                  T(b));
  }

  // -------------------------------------------------------------------- RoPE
  void rope_table(T* cos, T* sin, int max_pos, int D, const double* inv_freq) override {
    STRATA_CHECK(D % 2 == 0, "RoPE needs an even head dimension, got ", D);
    const int half = D / 2;
    auto* f = static_cast<double*>(scratch(kFreq, size_t(half) * sizeof(double)));
    gpu::copy_async(f, inv_freq, size_t(half) * sizeof(double), stream_);
    STRATA_LAUNCH(k_rope_table<T>, blocks_for(int64_t(max_pos) * half, 256), 256, 0, stream_, cos,
                  sin, max_pos, half, static_cast<const double*>(f));
    gpu::sync(stream_);  // the host's frequencies may go away
  }
  void rope_forward(T* x, const T* cos, const T* sin, int B, int T_, int H, int D,
                    int64_t row_stride, int pos0) override {
    rope(x, cos, sin, B, T_, H, D, row_stride, pos0, T(1));
  }
  void rope_backward(T* dx, const T* cos, const T* sin, int B, int T_, int H, int D,
                     int64_t row_stride, int pos0) override {
    rope(dx, cos, sin, B, T_, H, D, row_stride, pos0, T(-1));
  }

  // --------------------------------------------------------------- attention
  void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int Hq, int Hkv,
                         int D) override {
    check_heads(Hq, Hkv, D);
    const int64_t W = int64_t(Hq + 2 * Hkv) * D;
    AttnView<T> v{qkv,
                  qkv + int64_t(Hq) * D,
                  qkv + int64_t(Hq + Hkv) * D,
                  W,
                  int64_t(T_) * W,
                  W,
                  D,
                  B,
                  T_,
                  Hq,
                  Hkv,
                  D,
                  0};
    const int64_t rows = int64_t(B) * Hq * T_;
    if (rows == 0) return;
    STRATA_LAUNCH(k_attention_forward<T>, attn_blocks(rows), kAttnWarps * kWarp,
                  kAttnWarps * (D + kWarp) * sizeof(T), stream_, out, lse, v);
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                          int T_, int Hq, int Hkv, int D) override {
    check_heads(Hq, Hkv, D);
    const int64_t rows = int64_t(B) * Hq * T_;
    if (rows == 0) return;
    T* delta = static_cast<T*>(scratch(kDelta, size_t(rows) * sizeof(T)));
    STRATA_LAUNCH(k_attention_delta<T>, attn_blocks(rows), kAttnWarps * kWarp, 0, stream_, delta,
                  dout, out, B, T_, Hq, D);
    STRATA_LAUNCH(k_attention_backward_dq<T>, attn_blocks(rows), kAttnWarps * kWarp,
                  kAttnWarps * (2 * D + kWarp) * sizeof(T), stream_, dqkv, dout, qkv, lse,
                  static_cast<const T*>(delta), B, T_, Hq, Hkv, D);
    STRATA_LAUNCH(k_attention_backward_dkv<T>, attn_blocks(int64_t(B) * Hkv * T_),
                  kAttnWarps * kWarp, kAttnWarps * (2 * D + 2 * kWarp) * sizeof(T), stream_, dqkv,
                  dout, qkv, lse, static_cast<const T*>(delta), B, T_, Hq, Hkv, D);
  }
  void attention_cached_forward(T* out, const T* q, int64_t q_stride, const T* kc, const T* vc,
                                int n, int pos0, int Hq, int Hkv, int D, int max_len) override {
    check_heads(Hq, Hkv, D);
    if (n == 0) return;
    AttnView<T> v{q, kc, vc, q_stride, 0, D, int64_t(max_len) * D, 1, n, Hq, Hkv, D, pos0};
    STRATA_LAUNCH(k_attention_forward<T>, attn_blocks(int64_t(Hq) * n), kAttnWarps * kWarp,
                  kAttnWarps * (D + kWarp) * sizeof(T), stream_, out, static_cast<T*>(nullptr), v);
  }

  // ------------------------------------------------------- SwiGLU, residual
  void swiglu_forward(T* h, const T* gateup, int64_t N, int F) override {
    if (N == 0) return;
    STRATA_LAUNCH(k_swiglu<T>, blocks_for(N * F, 256), 256, 0, stream_, h, gateup, N, F);
  }
  void swiglu_backward(T* dgateup, const T* dh, const T* gateup, int64_t N, int F) override {
    if (N == 0) return;
    STRATA_LAUNCH(k_swiglu_backward<T>, blocks_for(N * F, 256), 256, 0, stream_, dgateup, dh,
                  gateup, N, F);
  }
  void residual_forward(T* out, const T* a, const T* b, int64_t n) override {
    if (n == 0) return;
    STRATA_LAUNCH(k_residual<T>, blocks_for(n, 256), 256, 0, stream_, out, a, b, n);
  }
  void residual_backward(T* da, T* db, const T* dout, int64_t n) override {
    if (n == 0 || (!da && !db)) return;
    STRATA_LAUNCH(k_residual_backward<T>, blocks_for(n, 256), 256, 0, stream_, da, db, dout, n);
  }

  // --------------------------------------------------- head + cross-entropy
  double head_ce_forward(T* xn, T* rstd, T* lse, T* token_nll, int64_t* n_valid, const T* x,
                         const T* wn, const T* wout, const int32_t* targets, int64_t N, int C,
                         int V, double eps, const ops::VocabShard<T>* shard) override {
    return head_ce(Mode::Forward, nullptr, nullptr, nullptr, xn, rstd, lse, token_nll, n_valid, x,
                   wn, wout, targets, N, C, V, eps, 0.0, shard);
  }
  void head_ce_backward(T* dx, T* dwn, T* dwout, const T* x, const T* xn, const T* rstd,
                        const T* lse, const T* wn, const T* wout, const int32_t* targets, int64_t N,
                        int C, int V, double dloss, const ops::VocabShard<T>* shard) override {
    head_ce(Mode::Backward, dx, dwn, dwout, const_cast<T*>(xn), const_cast<T*>(rstd),
            const_cast<T*>(lse), nullptr, nullptr, x, wn, wout, targets, N, C, V, 0.0, dloss,
            shard);
  }
  double head_ce_forward_backward(T* dx, T* dwn, T* dwout, T* xn, T* rstd, int64_t* n_valid,
                                  const T* x, const T* wn, const T* wout, const int32_t* targets,
                                  int64_t N, int C, int V, double eps, double dloss,
                                  const ops::VocabShard<T>* shard) override {
    return head_ce(Mode::ForwardBackward, dx, dwn, dwout, xn, rstd, nullptr, nullptr, n_valid, x,
                   wn, wout, targets, N, C, V, eps, dloss, shard);
  }
  void head_logits(T* logits, T* xn_scratch, const T* x, const T* wn, const T* wout, int64_t N,
                   int C, int V, double eps) override {
    if (N == 0) return;
    T* rstd = static_cast<T*>(scratch(kRstd, size_t(N) * sizeof(T)));
    rmsnorm_forward(xn_scratch, rstd, x, wn, N, C, eps);
    gemm_->gemm(false, true, N, V, C, T(1), xn_scratch, C, wout, C, T(0), logits, V);
  }

  // --------------------------------------------------------------------- MSE
  double mse_forward(const T* a, const T* b, int64_t n) override {
    if (n == 0) return 0.0;
    return device_sum(a, b, n, 1) / double(n);
  }
  void mse_backward(T* da, T* db, const T* a, const T* b, int64_t n, double dloss) override {
    if (n == 0 || (!da && !db)) return;
    STRATA_LAUNCH(k_mse_backward<T>, blocks_for(n, 256), 256, 0, stream_, da, db, a, b, n,
                  T(2.0 * dloss / double(n)));
  }

  // ------------------------------------------------------- optimizer, norms
  void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const ops::AdamWStep& s) override {
    if (n == 0) return;
    const T c1 = T(1.0 / (1.0 - std::pow(s.beta1, double(s.step))));
    const T c2 = T(1.0 / (1.0 - std::pow(s.beta2, double(s.step))));
    STRATA_LAUNCH(k_adamw<T>, blocks_for(n, 256), 256, 0, stream_, p, g, m, v, n, T(s.lr),
                  T(s.beta1), T(s.beta2), T(s.eps), T(1.0 - s.lr * s.weight_decay), c1, c2);
  }
  void sum_squares(double* acc, const T* x, int64_t n) override {
    if (n == 0) return;
    add_sum(acc, x, nullptr, n, 0, 1.0);
  }
  void scale_inplace(T* x, int64_t n, double s) override {
    if (n == 0) return;
    STRATA_LAUNCH(k_scale<T>, blocks_for(n, 256), 256, 0, stream_, x, n, T(s));
  }

 private:
  enum Slot {
    kTokens,
    kTargets,
    kFreq,
    kDelta,
    kRstd,
    kLogits,
    kDxn,
    kLse,
    kNll,
    kTarget,
    kSum,
    kPartial,
    kSlots
  };
  struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
  };
  enum class Mode { Forward, Backward, ForwardBackward };

  // Stream-ordered scratch, grown on demand (the old buffer is freed in stream
  // order, so kernels still using it finish first).
  void* scratch(Slot s, size_t bytes) {
    Scratch& b = scratch_[s];
    if (b.bytes < bytes) {
      gpu::free_async(b.p, stream_);
      b.bytes = std::max(bytes, b.bytes * 3 / 2);
      b.p = gpu::malloc_async(b.bytes, stream_);
    }
    return b.p;
  }
  const int32_t* upload_ints(Slot s, const int32_t* host, int64_t n) {
    auto* d = static_cast<int32_t*>(scratch(s, size_t(n) * sizeof(int32_t)));
    gpu::copy_async(d, host, size_t(n) * sizeof(int32_t), stream_);
    return d;
  }
  static int row_threads(int C) { return std::clamp((C + 31) / 32 * 32, 32, 256); }
  static unsigned attn_blocks(int64_t rows) {
    return unsigned((rows + kAttnWarps - 1) / kAttnWarps);
  }
  static void check_heads(int Hq, int Hkv, int D) {
    STRATA_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: ", Hq, " query heads do not group over ",
                 Hkv, " key/value heads");
    STRATA_CHECK(D <= kAttnMaxDLane * kWarp,
                 "attention kernels take head_dim <= ", kAttnMaxDLane * kWarp, ", got ", D);
  }
  void rope(T* x, const T* cos, const T* sin, int B, int T_, int H, int D, int64_t row_stride,
            int pos0, T sign) {
    const int64_t n = int64_t(B) * T_ * H * (D / 2);
    if (n == 0) return;
    STRATA_LAUNCH(k_rope<T>, blocks_for(n, 256), 256, 0, stream_, x, cos, sin, B, T_, H, D,
                  row_stride, pos0, sign);
  }
  // *acc += scale * sum of x^2 (kind 0), (x - y)^2 (kind 1) or x (kind 2), on
  // the stream.
  void add_sum(double* acc, const T* x, const T* y, int64_t n, int kind, double scale) {
    const unsigned parts = blocks_for(n, 256, 1024);
    auto* partial = static_cast<double*>(scratch(kPartial, parts * sizeof(double)));
    STRATA_LAUNCH(k_partial_sums<T>, parts, 256, 0, stream_, partial, x, y, n, kind);
    STRATA_LAUNCH(k_finish_sum<double>, 1, 256, 0, stream_, acc,
                  static_cast<const double*>(partial), int(parts), scale);
  }
  double device_sum(const T* x, const T* y, int64_t n, int kind) {
    auto* acc = static_cast<double*>(scratch(kSum, sizeof(double)));
    gpu::zero_async(acc, sizeof(double), stream_);
    add_sum(acc, x, y, n, kind, 1.0);
    double h = 0;
    gpu::copy_async(&h, acc, sizeof(double), stream_);
    gpu::sync(stream_);
    return h;
  }
  // The fused norm + head + cross-entropy, chunked over rows as the CPU
  // backend (backends/cpu/head_ce.cpp): per chunk one logits GEMM, the row
  // softmax kernel (gradient in place) and two GEMMs for dxn and dwout.
  double head_ce(Mode mode, T* dx, T* dwn, T* dwout, T* xn, T* rstd, T* lse, T* token_nll,
                 int64_t* n_valid, const T* x, const T* wn, const T* wout, const int32_t* targets,
                 int64_t N, int C, int V, double eps, double dloss,
                 const ops::VocabShard<T>* shard) {
    if (N == 0) {
      if (n_valid) *n_valid = 0;
      return 0.0;
    }
    int64_t R = std::clamp<int64_t>((int64_t(1) << 24) / std::max(V, 1), 256, 8192) / 16 * 16;
    R = std::min(R, N);
    T* logits = static_cast<T*>(scratch(kLogits, size_t(R) * V * sizeof(T)));
    const bool grad = mode != Mode::Forward;
    T* dxn =
        grad && (dx || dwn) ? static_cast<T*>(scratch(kDxn, size_t(N) * C * sizeof(T))) : nullptr;
    T* lse_buf = lse ? lse : static_cast<T*>(scratch(kLse, size_t(N) * sizeof(T)));
    T* nll_buf = token_nll ? token_nll : static_cast<T*>(scratch(kNll, size_t(N) * sizeof(T)));
    T* tl = shard ? static_cast<T*>(scratch(kTarget, size_t(R) * sizeof(T))) : nullptr;
    const int32_t* dt = upload_ints(kTargets, targets, N);
    if (mode != Mode::Backward) rmsnorm_forward(xn, rstd, x, wn, N, C, eps);
    const int threads = 256;
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t rows = std::min(R, N - r0);
      const T* xr = xn + r0 * C;
      const unsigned blocks = blocks_for(rows, 1, 8192);
      gemm_->gemm(false, true, rows, V, C, T(1), xr, C, wout, C, T(0), logits, V);
      if (shard) {
        if (mode != Mode::Backward) {
          STRATA_LAUNCH(k_ce_rows<T>, blocks, threads, 0, stream_, logits, rows, V, dt + r0,
                        lse_buf + r0, static_cast<T*>(nullptr), tl, 0, T(0), shard->v0,
                        int(ops::kIgnoreIndex));
          shard->combine(lse_buf + r0, tl, rows);
          STRATA_LAUNCH(k_ce_nll<T>, blocks_for(rows, 256), 256, 0, stream_, nll_buf + r0,
                        static_cast<const T*>(lse_buf + r0), static_cast<const T*>(tl), dt + r0,
                        rows, int(ops::kIgnoreIndex));
        }
        if (grad)
          STRATA_LAUNCH(k_ce_rows<T>, blocks, threads, 0, stream_, logits, rows, V, dt + r0,
                        lse_buf + r0, static_cast<T*>(nullptr), static_cast<T*>(nullptr), 2,
                        T(dloss), shard->v0, int(ops::kIgnoreIndex));
      } else {
        const int m = mode == Mode::Forward ? 0 : mode == Mode::Backward ? 2 : 1;
        STRATA_LAUNCH(k_ce_rows<T>, blocks, threads, 0, stream_, logits, rows, V, dt + r0,
                      lse_buf + r0,
                      mode == Mode::Backward ? static_cast<T*>(nullptr) : nll_buf + r0,
                      static_cast<T*>(nullptr), m, T(dloss), int64_t(0), int(ops::kIgnoreIndex));
      }
      if (!grad) continue;
      if (dxn)
        gemm_->gemm(false, false, rows, C, V, T(1), logits, V, wout, C, T(0), dxn + r0 * C, C);
      if (dwout) gemm_->gemm(true, false, V, C, rows, T(1), logits, V, xr, C, T(1), dwout, C);
    }
    if (dxn && shard) shard->reduce(dxn, N * C);
    if (dxn) rmsnorm_backward(dx, dwn, dxn, x, wn, rstd, N, C);
    if (mode == Mode::Backward) return 0.0;
    int64_t count = 0;
    for (int64_t n = 0; n < N; ++n) count += targets[n] != ops::kIgnoreIndex;
    if (n_valid) *n_valid = count;
    return device_sum(nll_buf, nullptr, N, 2);
  }

  std::shared_ptr<void> owner_;
  std::string name_;
  void* stream_;
  std::unique_ptr<GemmEngine<T>> gemm_;
  Scratch scratch_[kSlots];
};

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
