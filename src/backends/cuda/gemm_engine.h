// The GEMM interface of the kernel backends: cuBLASLt on a GPU
// (cuda_backend.cu), the CPU GEMM library as the SIMT executor's stand-in
// (simt_backend.cpp). Row-major, as backends/cpu/gemm.h:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// with A stored M x K (lda) or, when trans_a, K x M; B likewise. Pointers
// are backend memory; the call is ordered on the backend's stream.
//
// Both engines hand cuBLASLt (or its stand-in) only the GEMMs of the rule
// below and run every other one, and any GEMM cuBLASLt finds no algorithm
// for, on strata's own tiled kernel (k_gemm_tiled, kernels/gemm.cuh), so an
// operand cuBLASLt would reject slows one GEMM down instead of stopping the
// run, and the SIMT build runs that kernel for exactly the GEMMs a GPU would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>

#include "ops/dtype.h"
#include "ops/types.h"

namespace strata::cuda {

// The operands strata hands to cuBLASLt: every matrix (A, B and C) starts at
// a 16-byte aligned address and its leading dimension is a multiple of 16
// bytes in the element type cuBLASLt reads (bf16 operands: 8 elements; fp32:
// 4; double: 2). That is the alignment the cuBLAS documentation asks of
// operands for its tensor-core kernels (section "Tensor Core Usage",
// docs.nvidia.com/cuda/cublas: 16-byte aligned pointers, leading dimensions
// that are multiples of 16 bytes), and cuBLASLt's heuristic filters its
// kernels by the operands' alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES,
// which LtGemm passes): below it the heuristic may offer no algorithm at all
// (a bf16 ld not a multiple of 8 is the known case), and what it offers is a
// slow path anyway. Every
// full-size activation and weight of a model with dimensions that are
// multiples of 8 meets the rule; odd shapes and unaligned views do not.
inline constexpr size_t kLtAlignBytes = 16;
inline bool lt_operand_ok(const void* p, int64_t ld, size_t element_bytes) {
  return reinterpret_cast<uintptr_t>(p) % kLtAlignBytes == 0 &&
         (uint64_t(ld) * element_bytes) % kLtAlignBytes == 0;
}
// `operand_bytes`: the element size of A and B as cuBLASLt reads them (2 for
// bf16 operands); `out_bytes`: that of C.
inline bool lt_gemm_ok(const void* A, int64_t lda, const void* B, int64_t ldb, const void* C,
                       int64_t ldc, size_t operand_bytes, size_t out_bytes) {
  return lt_operand_ok(A, lda, operand_bytes) && lt_operand_ok(B, ldb, operand_bytes) &&
         lt_operand_ok(C, ldc, out_bytes);
}

template <typename T>
class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  // A, B and C may be activations stored in bf16 (ops/dtype.h; a T* is one
  // stored in T): with bf16 precision the engine reads bf16 operands as they
  // are and writes a bf16 C directly (rounded to nearest even from the fp32
  // accumulator, after alpha and beta * C); otherwise, and for the operands
  // its library is not given, it runs on fp32 copies (gemm_on_fp32_copies,
  // kernels/gemm.cuh): the same numbers, a copy each way.
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                    ops::ActIn<T> A, int64_t lda, ops::ActIn<T> B, int64_t ldb, T beta,
                    ops::Act<T> C, int64_t ldc) = 0;
  // FP32, or BF16: operands rounded to bfloat16 (round to nearest even),
  // fp32 accumulation and result. double GEMMs are always exact.
  virtual void set_precision(ops::MatmulPrecision p) = 0;
  virtual ops::MatmulPrecision precision() const = 0;
  virtual bool native_bf16() const = 0;
  virtual std::string path(ops::MatmulPrecision p) const = 0;

  // GEMMs that ran on strata's tiled kernel instead of cuBLASLt (or its
  // stand-in) since the engine was made: tests check the rule routes them.
  uint64_t fallback_gemms() const { return fallbacks_; }

  // While an operand is pinned, bf16 GEMMs that read it (the same pointer
  // and extent) convert it once instead of on every call: the LM head reads
  // its weight in every row chunk, twice. The caller keeps its values
  // unchanged until unpin (PinnedOperand does both). No effect in fp32.
  void pin_operand(const T* p) {
    pinned_ = p;
    ++pin_epoch_;
  }
  void unpin_operand() {
    pinned_ = nullptr;
    ++pin_epoch_;
  }
  // Operands converted to bf16 since the engine was made (tests count them).
  uint64_t bf16_conversions() const { return conversions_; }
  // Moves whenever a buffer the engine's GEMMs read or write on the device
  // (staging, kept weight copies) is made, grown or dropped: a recorded
  // graph refers to them (ops::Backend::graph_epoch).
  uint64_t memory_epoch() const { return memory_epoch_; }

  // Generation (ops::Backend::freeze_weights): the weights cannot change
  // until thawed, so bf16 GEMMs convert each B operand (every linear layer's
  // weight and the head's, as the CPU's few-row GEMMs key theirs) once, keep
  // the copy, and read it on every later call with the same operand. A decode
  // step reads every weight once per token: converting it each time moves 8
  // bytes an element (read 4, write 2, read 2) where the copy reads 2. Both
  // calls drop the copies.
  void freeze(bool on) {
    frozen_ = on;
    release_frozen();
  }
  bool frozen() const { return frozen_; }
  // A training step (ops::Backend::hold_weights): the operands, A or B, that
  // lie inside [base, base + n) (the weight arena) are kept converted the
  // same way until the next call (n = 0: none), so each weight is converted
  // once per step, not in each of its forward, input-gradient and
  // recomputation GEMMs of every micro-batch.
  void hold(const T* base, int64_t n) {
    held_lo_ = n > 0 ? base : nullptr;
    held_hi_ = n > 0 ? base + n : nullptr;
    release_frozen();
  }

 protected:
  // Whether the operand src (n elements, B or not) has a kept copy.
  bool keeps_copy(const T* src, int64_t n, bool is_b) const {
    if (frozen_ && is_b) return true;
    return held_lo_ && src >= held_lo_ && src + n <= held_hi_;
  }
  // Frees the frozen copies (an engine keeps them as it keeps its buffers).
  virtual void release_frozen() = 0;
  // Key of a frozen copy: the operand as the GEMM reads it.
  using FrozenKey = std::tuple<const T*, int64_t, int64_t, int64_t>;  // (src, rows, cols, ld)
  // Counts a conversion made for a frozen copy (the copy is made once).
  void note_conversion() { ++conversions_; }
  bool frozen_ = false;
  const T *held_lo_ = nullptr, *held_hi_ = nullptr;
  void note_fallback() { ++fallbacks_; }
  void note_memory_moved() { ++memory_epoch_; }
  // Before an engine converts operand src (n elements from src) into its
  // staging slot: true when src is the pinned operand and slot kPinnedSlot
  // already holds its conversion (nothing to do); otherwise counts the
  // conversion, and for the pinned operand sets slot to kPinnedSlot and
  // records that it will hold it.
  static constexpr int kPinnedSlot = 2;
  bool converted_already(const T* src, int64_t n, int& slot) {
    if (src == pinned_ && pinned_ready_ == pin_epoch_ && pinned_n_ == n) {
      slot = kPinnedSlot;
      return true;
    }
    if (src == pinned_) {
      slot = kPinnedSlot;
      pinned_ready_ = pin_epoch_;
      pinned_n_ = n;
    }
    ++conversions_;
    return false;
  }

 private:
  uint64_t fallbacks_ = 0, conversions_ = 0, pin_epoch_ = 0, pinned_ready_ = ~uint64_t(0);
  uint64_t memory_epoch_ = 0;
  const T* pinned_ = nullptr;
  int64_t pinned_n_ = 0;
};

// Pins an operand for a scope (GemmEngine::pin_operand).
template <typename T>
class PinnedOperand {
 public:
  PinnedOperand(GemmEngine<T>& g, const T* p) : g_(g) { g_.pin_operand(p); }
  ~PinnedOperand() { g_.unpin_operand(); }
  PinnedOperand(const PinnedOperand&) = delete;
  PinnedOperand& operator=(const PinnedOperand&) = delete;

 private:
  GemmEngine<T>& g_;
};

}  // namespace strata::cuda
