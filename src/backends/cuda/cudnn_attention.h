// cuDNN's fused attention as the cuda backend's ExternalAttention
// (model.attention = "cudnn"). Built only when CMake found cuDNN and the
// cuDNN frontend's headers (STRATA_HAVE_CUDNN; docs/gpu.md).
#pragma once

#include <memory>

#include "backends/cuda/external_attention.h"

namespace strata::cuda {

// The cuDNN handle is made on first use, on the calling thread's device.
std::unique_ptr<ExternalAttention> make_cudnn_attention();

}  // namespace strata::cuda
