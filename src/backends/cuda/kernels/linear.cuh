// Linear layer y = x W^T (+ b), W stored [out, in]: GEMMs on the backend's
// engine (cuBLASLt, or the CPU GEMM under SIMT), the bias through bias.cuh.
// No kernels of its own. bf16 activations are staged (stage.cuh) until the
// engines read and write bf16 themselves.
#pragma once

#include "backends/cuda/kernels/bias.cuh"
#include "backends/cuda/kernels/context.cuh"
#include "backends/cuda/kernels/stage.cuh"
#include "ops/types.h"

namespace strata::cuda {
inline namespace STRATA_TARGET_NS {

template <typename T>
void linear_forward(KernelContext<T>& k, ops::Act<T> out_, ops::ActIn<T> x_, const T* w,
                    const T* bias, int64_t N, int IC, int OC, const ops::LinearLd& ld) {
  const int64_t lx = ld.x ? ld.x : IC, lw = ld.w ? ld.w : IC, lo = ld.out ? ld.out : OC;
  if (N == 0) return;
  const DeviceStagedIn<T> x(k, kStage0, x_, view_elements(N, lx, IC));
  // A strided output view keeps the columns it does not cover: read it in.
  const DeviceStaged<T> out(k, kStage1, out_, view_elements(N, lo, OC), lo != OC);
  k.gemm().gemm(false, true, N, OC, IC, T(1), x.get(), lx, w, lw, T(0), out.get(), lo);
  if (bias) bias_add_forward<T>(k, out.get(), bias, N, OC, lo);
}

template <typename T>
void linear_backward(KernelContext<T>& k, ops::Act<T> dx_, T* dw, T* dbias, ops::ActIn<T> dout_,
                     ops::ActIn<T> x_, const T* w, int64_t N, int IC, int OC, bool accumulate_dx,
                     const ops::LinearLd& ld) {
  const int64_t lx = ld.x ? ld.x : IC, lw = ld.w ? ld.w : IC, lo = ld.out ? ld.out : OC;
  if (N == 0) return;
  const DeviceStagedIn<T> dout(k, kStage0, dout_, view_elements(N, lo, OC));
  const DeviceStagedIn<T> x(k, kStage1, dw ? x_ : ops::ActIn<T>(), view_elements(N, lx, IC));
  const DeviceStaged<T> dx(k, kStage2, dx_, view_elements(N, lx, IC), accumulate_dx || lx != IC);
  if (dx_)
    k.gemm().gemm(false, false, N, IC, OC, T(1), dout.get(), lo, w, lw, T(accumulate_dx),
                  dx.get(), lx);
  if (dw) k.gemm().gemm(true, false, OC, IC, N, T(1), dout.get(), lo, x.get(), lx, T(1), dw, lw);
  if (dbias) bias_add_backward<T>(k, dbias, dout.get(), N, OC, lo);
}

}  // namespace STRATA_TARGET_NS
}  // namespace strata::cuda
