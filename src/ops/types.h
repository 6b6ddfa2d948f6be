// Types of the op contract, shared by every backend and by the code that calls
// ops (model, optimizer). Backends include this file; it includes no backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/targets.h"
#include "ops/dtype.h"

namespace strata::ops {

// Targets equal to this are ignored by the cross-entropy (as in PyTorch / HF);
// defined with the data that writes it (core/targets.h).
using strata::kIgnoreIndex;

// Precision of the matmuls of the linear layers and the LM head: FP32, or BF16
// (operands rounded to bfloat16, fp32 accumulation and result; on the kernel
// backends attention then runs on tensor cores too; everything else stays
// fp32).
enum class MatmulPrecision { FP32, BF16 };

// "fp32", "bf16" or "auto" (bf16 where `native_bf16`, else fp32); false for
// any other text.
inline bool parse_matmul_precision(const std::string& name, bool native_bf16,
                                   MatmulPrecision* out) {
  if (name == "fp32")
    *out = MatmulPrecision::FP32;
  else if (name == "bf16")
    *out = MatmulPrecision::BF16;
  else if (name == "auto")
    *out = native_bf16 ? MatmulPrecision::BF16 : MatmulPrecision::FP32;
  else
    return false;
  return true;
}

// The attention kernels of a kernel backend (recipe key model.attention):
// strata's own (tensor-core flash kernels with bf16 matmuls, the reference
// kernels otherwise) or cuDNN's fused attention (device cuda, bf16 matmuls,
// a build with cuDNN and its frontend headers).
enum class AttentionImpl { Strata, Cudnn };
// "strata" or "cudnn"; false for any other text.
inline bool parse_attention_impl(const std::string& name, AttentionImpl* out) {
  if (name == "strata")
    *out = AttentionImpl::Strata;
  else if (name == "cudnn")
    *out = AttentionImpl::Cudnn;
  else
    return false;
  return true;
}

// Clip factor as torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)).
inline double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

// One AdamW step's hyperparameters, and its global-norm clipping: the update
// reads the gradient times a factor, either `clip` (computed by the caller) or,
// when `squares` is set, clip_coefficient(sqrt(squares[0] + squares[1]),
// max_norm) with the two partial sums of squares read where the update runs
// (backend memory, filled by sum_squares on the same stream): no host read
// between the norm and the update, and a non-finite norm updates nothing.
struct AdamWStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // 1-based step number, for bias correction
  double clip = 1.0;
  const double* squares = nullptr;
  double max_norm = 0.0;
};

// The factor a step applies to its gradient (`squares` read from host memory:
// the CPU backend); false when the norm is not finite (nothing is updated).
inline bool adamw_clip_factor(const AdamWStep& s, double* factor) {
  if (!s.squares) {
    *factor = s.clip;
    return true;
  }
  const double norm = std::sqrt(s.squares[0] + s.squares[1]);
  if (!(norm <= 1.7976931348623157e308)) return false;  // NaN or inf
  *factor = clip_coefficient(norm, s.max_norm);
  return true;
}

// Leading dimensions of a linear layer's operands, for views into larger
// matrices (e.g. the columns of one shard of a full weight): x rows are ldx
// apart, w rows ldw apart, out (and dout) rows ldout apart. 0 means compact
// (IC, IC and OC).
struct LinearLd {
  int64_t x = 0, w = 0, out = 0;
};

}  // namespace strata::ops
