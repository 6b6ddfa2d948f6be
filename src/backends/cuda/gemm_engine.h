// The GEMM interface of the kernel backends: cuBLASLt on a GPU
// (cuda_backend.cu), the CPU GEMM library as the SIMT executor's stand-in
// (simt_backend.cpp). Row-major, as backends/cpu/gemm.h:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
// with A stored M x K (lda) or, when trans_a, K x M; B likewise. Pointers
// are backend memory; the call is ordered on the backend's stream.
#pragma once

#include <cstdint>
#include <string>

#include "ops/types.h"

namespace strata::cuda {

template <typename T>
class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                    const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
                    int64_t ldc) = 0;
  // FP32, or BF16: operands rounded to bfloat16 (round to nearest even),
  // fp32 accumulation and result. double GEMMs are always exact.
  virtual void set_precision(ops::MatmulPrecision p) = 0;
  virtual ops::MatmulPrecision precision() const = 0;
  virtual bool native_bf16() const = 0;
  virtual std::string path(ops::MatmulPrecision p) const = 0;
};

}  // namespace strata::cuda
