// What a launcher (the host half of each backends/cuda/kernels/<op>.cuh)
// needs from the KernelBackend it runs for: the stream its work is ordered
// on, the GEMM engine, and stream-ordered scratch. Host inputs (token ids,
// targets, RoPE frequencies) are copied to scratch before a kernel reads them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

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
  kSlots
};

template <typename T>
class KernelContext {
 public:
  KernelContext(void* stream, GemmEngine<T>& gemm) : stream_(stream), gemm_(&gemm) {}
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  void* stream() const { return stream_; }
  GemmEngine<T>& gemm() { return *gemm_; }

  // Slot s with at least `bytes`, grown on demand (the old buffer is freed in
  // stream order, so kernels still using it finish first).
  void* scratch(Slot s, size_t bytes) {
    Buffer& b = scratch_[s];
    if (b.bytes < bytes) {
      gpu::free_async(b.p, stream_);
      b.bytes = std::max(bytes, b.bytes * 3 / 2);
      b.p = gpu::malloc_async(b.bytes, stream_);
    }
    return b.p;
  }
  // n host ints copied into slot s, for kernels to read.
  const int32_t* upload_ints(Slot s, const int32_t* host, int64_t n) {
    auto* d = static_cast<int32_t*>(scratch(s, size_t(n) * sizeof(int32_t)));
    gpu::copy_async(d, host, size_t(n) * sizeof(int32_t), stream_);
    return d;
  }
  // Frees every slot in stream order (the backend does before it goes).
  void free_scratch() {
    for (Buffer& b : scratch_) {
      gpu::free_async(b.p, stream_);
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
  Buffer scratch_[kSlots];
};

// Threads of a block that owns one row of C elements: a multiple of 32 up to 256.
inline int row_threads(int C) { return std::clamp((C + 31) / 32 * 32, 32, 256); }

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
