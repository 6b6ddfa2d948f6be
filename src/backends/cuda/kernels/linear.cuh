// Linear layer y = x W^T (+ b), W stored [out, in]: GEMMs on the backend's
// engine (cuBLASLt, or the CPU GEMM under SIMT), the bias through bias.cuh.
// No kernels of its own. bf16 activations go to the engine as they are: with
// bf16 precision cuBLASLt reads them and writes a bf16 output directly
// (gemm_engine.h); the bias is added to the stored (rounded) output.
#pragma once

#include "backends/cuda/kernels/bias.cuh"
#include "backends/cuda/kernels/context.cuh"
#include "ops/types.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
void linear_forward(KernelContext<T>& k, ops::Act<T> out, ops::ActIn<T> x, const T* w,
                    const T* bias, int64_t N, int IC, int OC, const ops::LinearLd& ld) {
  const int64_t lx = ld.x ? ld.x : IC, lw = ld.w ? ld.w : IC, lo = ld.out ? ld.out : OC;
  if (N == 0) return;
  k.gemm().gemm(false, true, N, OC, IC, T(1), x, lx, w, lw, T(0), out, lo);
  if (bias) bias_add_forward<T>(k, out, bias, N, OC, lo);
}

template <typename T>
void linear_backward(KernelContext<T>& k, ops::Act<T> dx, T* dw, T* dbias, ops::ActIn<T> dout,
                     ops::ActIn<T> x, const T* w, int64_t N, int IC, int OC, bool accumulate_dx,
                     const ops::LinearLd& ld) {
  const int64_t lx = ld.x ? ld.x : IC, lw = ld.w ? ld.w : IC, lo = ld.out ? ld.out : OC;
  if (N == 0) return;
  if (dx) k.gemm().gemm(false, false, N, IC, OC, T(1), dout, lo, w, lw, T(accumulate_dx), dx, lx);
  if (dw) k.gemm().gemm(true, false, OC, IC, N, T(1), dout, lo, x, lx, T(1), dw, lw);
  if (dbias) bias_add_backward<T>(k, dbias, dout, N, OC, lo);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
