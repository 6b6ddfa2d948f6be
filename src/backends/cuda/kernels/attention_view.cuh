// The rows an attention kernel reads (attention.cuh, flash_attention.cuh).
#pragma once

#include <cstdint>

#include "backends/cuda/portable.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// Where the rows live. Query row (b, i, h): q + (b*Tq + i)*q_stride + h*D.
// Key j of kv head g: k + b*kv_batch + j*kv_stride + g*kv_head (v alike).
// Query i sees keys 0 .. i + key_offset (causal).
template <typename T>
struct AttnView {
  const T* q;
  const T* k;
  const T* v;
  int64_t q_stride, kv_batch, kv_stride, kv_head;
  int B, Tq, Hq, Hkv, D, key_offset;
};

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
