// An attention implementation from a library (cuDNN's fused attention,
// cudnn_attention.cpp) behind the kernel backend's attention launchers
// (kernels/attention.cuh), which convert to and from its bf16 buffers. The
// buffers are backend memory in strata's layouts:
//   qkv [B, T, (Hq + 2 Hkv) D] (post-RoPE q and k), o [B, T, Hq D],
//   lse [B, Hq, T] fp32 (natural log of the row's softmax denominator, the
//   scores scaled by 1/sqrt(D)), dqkv like qkv (overwritten).
// Calls are ordered on `stream`; `workspace` is scratch the implementation
// asks for (workspace_bytes) before each call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::cuda {

struct AttentionShape {
  int B, T, Hq, Hkv, D;
};

class ExternalAttention {
 public:
  virtual ~ExternalAttention() = default;
  virtual const char* name() const = 0;
  // Scratch bytes the next forward (backward) of this shape needs; builds
  // and caches the shape's plan on first use (throws strata::Error naming
  // the shape when the library has no plan for it).
  virtual size_t forward_workspace(const AttentionShape& s) = 0;
  virtual size_t backward_workspace(const AttentionShape& s) = 0;
  virtual void forward(void* stream, uint16_t* o, float* lse, const uint16_t* qkv,
                       const AttentionShape& s, void* workspace) = 0;
  virtual void backward(void* stream, uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                        const uint16_t* o, const float* lse, const AttentionShape& s,
                        void* workspace) = 0;
};

}  // namespace strata::cuda
