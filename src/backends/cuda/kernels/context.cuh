// What a launcher (the host half of each backends/cuda/kernels/<op>.cuh)
// needs from the KernelBackend it runs for: the stream its work is ordered
// on, the GEMM engine, stream-ordered scratch from the backend's DevicePool,
// and pinned staging for host inputs. Host inputs (token ids, targets) go
// host -> pinned staging -> scratch before a kernel reads them, so the copy is
// a real async DMA and the caller's array may go away at once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <memory>
#include <string>
#include <utility>

#include "backends/cuda/device_pool.h"
#include "backends/cuda/external_attention.h"
#include "backends/cuda/gemm_engine.h"
#include "backends/cuda/kernels/common.cuh"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// Scratch slots, one buffer each.
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
  kColumns,    // column sums' partials (reduce.cuh)
  kAttnQkv16,  // bf16 buffers of an external attention (context.cuh)
  kAttnOut16,
  kAttnDout16,
  kAttnGrad16,
  kAttnWork,
  kStage0,  // fp32 copies of bf16 activations (stage.cuh)
  kStage1,
  kStage2,
  kStage3,
  kStage4,
  kSlots
};

// Pinned host buffers for one kind of upload (or read-back), owned by the
// backend so they outlive every copy from them. A ring of two: a step
// uploads tokens twice per micro-batch (embedding forward and backward) and
// targets twice (head forward and backward), with a loss read (a stream
// synchronisation) in between, so the buffer taken has always finished its
// previous copy and the event wait below returns at once; it is there for
// correctness when that pattern changes.
class PinnedStaging {
 public:
  explicit PinnedStaging(const char* name) : name_(name) {}
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging() {  // after the backend synchronised: no copy in flight
    for (Buffer& b : ring_) {
      gpu::free_host(b.p);
      gpu::event_destroy(b.done);
    }
  }

  // A pinned buffer of at least `bytes` that no queued copy uses any more
  // (waits for its last one): the host may fill it, then queue a copy from it
  // and call copied().
  void* take(size_t bytes) {
    next_ = (next_ + 1) % kRing;
    Buffer& b = ring_[next_];
    if (b.used) gpu::event_wait(b.done);
    if (b.bytes < bytes) {
      gpu::free_host(b.p);
      b.bytes = std::max(bytes, b.bytes * 3 / 2);
      b.p = gpu::malloc_host(b.bytes, name_);
    }
    gpu::host_touch(b.p, "re-staging the");
    return b.p;
  }
  // The copy from (or to) the buffer take() returned is queued on `stream`.
  void copied(void* stream) {
    Buffer& b = ring_[next_];
    if (!b.done) b.done = gpu::event_create();
    gpu::event_record(b.done, stream);
    b.used = true;
  }

 private:
  static constexpr int kRing = 2;
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
    gpu::Event done{};
    bool used = false;
  };
  const char* name_;
  Buffer ring_[kRing];
  int next_ = 0;
};

template <typename T>
class KernelContext {
 public:
  KernelContext(void* stream, GemmEngine<T>& gemm, DevicePool& pool)
      : stream_(stream), gemm_(&gemm), pool_(&pool) {}
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  void* stream() const { return stream_; }
  GemmEngine<T>& gemm() { return *gemm_; }
  DevicePool& pool() { return *pool_; }

  // The attention implementation (ops::AttentionImpl). The backend gives the
  // library one it has (the cuda backend of a build with cuDNN), or the
  // reason it has none, which set_attention(Cudnn) then reports.
  void set_external_attention(std::unique_ptr<ExternalAttention> x, std::string why_none) {
    external_ = std::move(x);
    why_none_ = std::move(why_none);
  }
  void set_attention(ops::AttentionImpl a) {
    if (a == ops::AttentionImpl::Cudnn && !external_) fail(cat("cudnn: ", why_none_));
    attention_ = a;
  }
  // Rows per chunk of the LM head (head_ce.cuh), 0: its own rule. Tests
  // force small chunks with it.
  int64_t head_chunk_rows() const { return head_rows_; }
  void set_head_chunk_rows(int64_t r) { head_rows_ = r; }
  // bf16 activations an op ran on fp32 copies of (stage.cuh), since the
  // context was made: tests check which ops still do.
  uint64_t staged_activations() const { return staged_; }
  void note_staged() { ++staged_; }
  // The external attention to run, or null for strata's kernels.
  ExternalAttention* external_attention() const {
    return attention_ == ops::AttentionImpl::Cudnn ? external_.get() : nullptr;
  }

  // Slot s with at least `bytes`, grown on demand (the old buffer goes back to
  // the pool in stream order, so kernels still using it finish first).
  void* scratch(Slot s, size_t bytes) {
    Buffer& b = scratch_[s];
    if (b.bytes < bytes) {
      ++memory_epoch_;
      pool_->give(b.p);
      b.bytes = std::max(bytes, b.bytes * 3 / 2);
      b.p = pool_->take(b.bytes);
    }
    return b.p;
  }
  // n host ints copied into slot s through pinned staging, for kernels to
  // read; `host` may be reused as soon as this returns.
  const int32_t* upload_ints(Slot s, const int32_t* host, int64_t n) {
    const size_t bytes = size_t(n) * sizeof(int32_t);
    auto* d = static_cast<int32_t*>(scratch(s, bytes));
    PinnedStaging& st = s == kTargets ? targets_ : tokens_;
    void* pinned = st.take(bytes);
    if (bytes) std::memcpy(pinned, host, bytes);
    gpu::copy_async(d, pinned, bytes, stream_);
    st.copied(stream_);
    return d;
  }
  // n doubles of backend memory read to the host through a pinned buffer:
  // synchronises the stream (the one wait of a loss or norm read).
  void read_doubles(double* host, const double* src, int n) {
    const size_t bytes = size_t(n) * sizeof(double);
    void* pinned = readback_.take(bytes);
    gpu::copy_async(pinned, src, bytes, stream_);
    readback_.copied(stream_);
    gpu::sync(stream_);
    gpu::host_touch(pinned, "reading the");
    if (bytes) std::memcpy(host, pinned, bytes);
  }
  // Moves whenever a scratch slot does (ops::Backend::graph_epoch).
  uint64_t memory_epoch() const { return memory_epoch_; }
  // Returns every slot to the pool in stream order (the backend does before
  // it goes).
  void free_scratch() {
    ++memory_epoch_;
    for (Buffer& b : scratch_) {
      pool_->give(b.p);
      b = Buffer{};
    }
  }

 private:
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
  };
  void* stream_;
  GemmEngine<T>* gemm_;
  DevicePool* pool_;
  Buffer scratch_[kSlots];
  uint64_t memory_epoch_ = 0;
  std::unique_ptr<ExternalAttention> external_;
  std::string why_none_ = "this backend has no cuDNN attention";
  ops::AttentionImpl attention_ = ops::AttentionImpl::Strata;
  int64_t head_rows_ = 0;
  uint64_t staged_ = 0;
  PinnedStaging tokens_{"token ids"}, targets_{"targets"}, readback_{"loss read-back"};
};

// Threads of a block that owns one row of C elements: a multiple of 32 up to 256.
inline int row_threads(int C) { return std::clamp((C + 31) / 32 * 32, 32, 256); }

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
