// The rows an attention kernel reads (attention.cuh, flash_attention.cuh).
#pragma once

#include <cstdint>

#include "backends/cuda/portable.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

// Where the rows live. Query row (b, i, h): q + (b*Tq + i)*q_stride + h*D.
// Key j of kv head g: k + b*kv_batch + j*kv_stride + g*kv_head (v alike).
// Query i sees keys 0 .. i + key_offset (causal).
// Decoding (attention_decode, the reference kernel only): with key_pos set,
// batch b's offset is key_pos[b] and its keys are cache block kv_slot[b]
// (both read from device memory when the kernel runs, so a recorded launch
// serves every later position); an offset outside [0, key_limit) gives the
// row zeros.
// KV: the keys' and values' storage (generation's bf16 KV cache beside fp32
// activations; the reference kernel only), T's by default.
template <typename T, typename KV = T>
struct AttnView {
  const T* q;
  const KV* k;
  const KV* v;
  int64_t q_stride, kv_batch, kv_stride, kv_head;
  int B, Tq, Hq, Hkv, D, key_offset;
  const int32_t* key_pos = nullptr;
  const int32_t* kv_slot = nullptr;
  int key_limit = 0;
};

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
