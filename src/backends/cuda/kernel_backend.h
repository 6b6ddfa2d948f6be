// KernelBackend: ops::Backend implemented with the kernels of
// backends/cuda/kernels/ and a GemmEngine. The same source compiles twice:
// with nvcc into the CUDA backend ("cuda": device memory, one stream,
// cuBLASLt) and with the host compiler into the SIMT backend ("simt": host
// memory that the model must treat as device memory, the CPU SIMT executor,
// the CPU GEMM). Include it from exactly one translation unit per build.
//
// Each op of ops/ops.def forwards to the launcher of the same name in
// kernels/<op>.cuh, which takes the backend's KernelContext (stream, GEMM
// engine, scratch, pinned staging) first. Host synchronisation happens only
// where the interface says: to_host, read_scalars, synchronize, and the ops
// returning a loss to the host (head_ce_forward*, mse_forward). Device memory
// comes from a DevicePool (device_pool.h): free() and free_scalars() neither
// synchronise nor call cudaFree, so a training step in steady state makes no
// driver allocation. Token ids, targets and the loss and norm reads go
// through pinned buffers the context owns (context.cuh).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "backends/cuda/device_pool.h"
#include "backends/cuda/gemm_engine.h"
#include "backends/cuda/kernels/adamw.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_cached.cuh"
#include "backends/cuda/kernels/axpby.cuh"
#include "backends/cuda/kernels/bias.cuh"
#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/embedding.cuh"
#include "backends/cuda/kernels/grad_norm.cuh"
#include "backends/cuda/kernels/head_ce.cuh"
#include "backends/cuda/kernels/linear.cuh"
#include "backends/cuda/kernels/mse.cuh"
#include "backends/cuda/kernels/residual.cuh"
#include "backends/cuda/kernels/rmsnorm.cuh"
#include "backends/cuda/kernels/rope.cuh"
#include "backends/cuda/kernels/swiglu.cuh"
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
      : owner_(std::move(owner)),
        name_(std::move(name)),
        stream_(stream),
        gemm_(std::move(gemm)),
        pool_(stream),
        ctx_(stream, *gemm_, pool_) {}
  ~KernelBackend() override {
    ctx_.free_scratch();
    gpu::sync(stream_);  // no copy from pinned staging or use of a pooled block in flight
  }

  const char* name() const override { return name_.c_str(); }
  GemmEngine<T>& gemm_engine() { return *gemm_; }
  // Returns the cached device blocks to the driver (synchronises).
  void trim_memory() { pool_.trim(); }
  size_t cached_bytes() const { return pool_.cached_bytes(); }

  // ---------------------------------------------------------- memory, stream
  T* alloc(size_t n) override {
    T* p = static_cast<T*>(pool_.take(n * sizeof(T)));
    gpu::zero_async(p, n * sizeof(T), stream_);
    return p;
  }
  // Stream-ordered reuse: see device_pool.h for why no sync is needed.
  void free(T* p) override { pool_.give(p); }
  void zero(ops::Act<T> p, int64_t n) override {
    gpu::zero_async(p.raw(), size_t(n) * ops::dtype_size(p.dtype()), stream_);
  }
  void copy(ops::Act<T> dst, ops::ActIn<T> src, int64_t n) override {
    if (dst.dtype() == src.dtype()) {
      gpu::copy_async(dst.raw(), src.raw(), size_t(n) * ops::dtype_size(dst.dtype()), stream_);
    } else if (n > 0) {
      if constexpr (std::is_same_v<T, float>) {  // (Act allows bf16 beside float only)
        if (dst.is_bf16())
          STRATA_LAUNCH(k_to_bf16<float>, blocks_for(n, 256), 256, 0, stream_,
                        static_cast<uint16_t*>(dst.raw()), src.template as<const float>(), n);
        else
          STRATA_LAUNCH(k_from_bf16<float>, blocks_for(n, 256), 256, 0, stream_,
                        dst.template as<float>(), static_cast<const uint16_t*>(src.raw()), n);
      }
    }
  }
  // to_host and from_host take the caller's pageable host memory: from_host's
  // cudaMemcpyAsync has read a pageable source when it returns, and to_host
  // waits. A pinned caller buffer would need context.cuh's staging rules.
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
    auto* p = static_cast<double*>(pool_.take(size_t(n) * sizeof(double)));
    gpu::zero_async(p, size_t(n) * sizeof(double), stream_);
    return p;
  }
  void free_scalars(double* p) override { pool_.give(p); }
  void zero_scalars(double* p, int n) override {
    gpu::zero_async(p, size_t(n) * sizeof(double), stream_);
  }
  void read_scalars(double* dst, const double* p, int n) override { ctx_.read_doubles(dst, p, n); }
  int32_t* alloc_ints(size_t n) override {
    auto* p = static_cast<int32_t*>(pool_.take((n ? n : 1) * sizeof(int32_t)));
    gpu::zero_async(p, (n ? n : 1) * sizeof(int32_t), stream_);
    return p;
  }
  void free_ints(int32_t* p) override { pool_.give(p); }
  // A pageable source, as from_host: read before cudaMemcpyAsync returns.
  void ints_from_host(int32_t* dst, const int32_t* src, size_t n) override {
    gpu::copy_async(dst, src, n * sizeof(int32_t), stream_);
  }

  // ------------------------------------------------------------------ graphs
  // CUDA graphs by stream capture; under SIMT the executor's recording
  // (portable.h). Not while kernel timing is on (events around each launch).
  bool graphs() const override { return !gpu::kernel_timing(); }
  void begin_capture() override {
    STRATA_CHECK(!capturing_, "begin_capture: a capture is already under way");
    capture_epoch_ = graph_epoch();
    gpu::begin_capture(stream_);
    capturing_ = true;
  }
  std::unique_ptr<typename ops::Backend<T>::Graph> end_capture() override {
    STRATA_CHECK(capturing_, "end_capture without begin_capture");
    capturing_ = false;
    auto g = std::make_unique<Graph>();
    g->exec = gpu::end_capture(stream_);
    // An op that made or moved the backend's memory while capturing has put
    // a pointer into the recording that its next use may not match.
    STRATA_CHECK(graph_epoch() == capture_epoch_,
                 "a graph capture moved the backend's staging or scratch memory: run the same "
                 "ops once outside a capture first");
    return g;
  }
  void replay(const typename ops::Backend<T>::Graph& g) override {
    gpu::replay(*static_cast<const Graph&>(g).exec, stream_);
  }
  uint64_t graph_epoch() const override { return ctx_.memory_epoch() + gemm_->memory_epoch(); }

  // ----------------------------------------------------------------- matmuls
  void set_matmul_precision(ops::MatmulPrecision p) override { gemm_->set_precision(p); }
  // Generation: bf16 GEMMs keep each weight converted once (GemmEngine::freeze).
  void freeze_weights(bool frozen) override { gemm_->freeze(frozen); }
  // A training step: each weight converted once (GemmEngine::hold).
  void hold_weights(const T* base, int64_t n) override { gemm_->hold(base, n); }
  bool native_bf16() const override { return gemm_->native_bf16(); }
  std::string matmul_path(ops::MatmulPrecision p) const override { return gemm_->path(p); }
  void set_attention(ops::AttentionImpl a) override { ctx_.set_attention(a); }
  // Tests: rows per LM-head chunk (0: the rule of head_ce.cuh).
  void set_head_chunk_rows(int64_t rows) { ctx_.set_head_chunk_rows(rows); }
  // bf16 activations staged through fp32 copies so far (KernelContext).
  uint64_t staged_activations() const { return ctx_.staged_activations(); }
  // The library attention this backend may run (cuda_backend.cu), or why it
  // has none.
  void set_external_attention(std::unique_ptr<ExternalAttention> x, std::string why_none) {
    ctx_.set_external_attention(std::move(x), std::move(why_none));
  }

  // --------------------------------------------------------------------- ops
  // The buffers an op is given (T* and activations; token ids, targets,
  // counts and RoPE's frequencies are host memory by contract) must be device
  // memory: checked under the SIMT executor's strict mode, where host memory
  // would work unnoticed (float models: a double model's T* cannot be told
  // from RoPE's host frequencies by type).
  template <typename... A>
  static void check_operands(const char* op, const A&... a) {
    if constexpr (gpu::kSimulated && std::is_same_v<T, float>) (check_operand(op, a), ...);
  }
  template <typename X>
  static void check_operand(const char* op, const X& x) {
    if constexpr (std::is_pointer_v<X> &&
                  std::is_same_v<std::remove_cv_t<std::remove_pointer_t<X>>, T>)
      gpu::check_operand(x, op);
    else if constexpr (std::is_same_v<X, ops::Act<T>> || std::is_same_v<X, ops::ActIn<T>>)
      gpu::check_operand(x.raw(), op);
  }

  // Every op of ops/ops.def: the launcher of the same name (kernels/<op>.cuh).
#define STRATA_DEFAULT(...)
#define STRATA_UNPAREN(...) __VA_ARGS__
#define STRATA_OP(role, name, ret, params, args)     \
  ret name params override {                         \
    check_operands(#name, STRATA_UNPAREN args);      \
    return cuda::name<T>(ctx_, STRATA_UNPAREN args); \
  }
#include "ops/ops.def"
#undef STRATA_OP
#undef STRATA_UNPAREN
#undef STRATA_DEFAULT

 private:
  struct Graph final : ops::Backend<T>::Graph {
    std::unique_ptr<gpu::GraphExec> exec;
  };
  bool capturing_ = false;
  uint64_t capture_epoch_ = 0;
  std::shared_ptr<void> owner_;
  std::string name_;
  void* stream_;
  std::unique_ptr<GemmEngine<T>> gemm_;
  DevicePool pool_;  // before ctx_, which returns its scratch to it
  KernelContext<T> ctx_;
};

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
