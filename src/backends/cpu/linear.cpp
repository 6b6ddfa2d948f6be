// Linear layer y = x W^T (+ b) with W stored [out, in] as in Hugging Face; the
// bias is bias.cpp's add.
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"

namespace strata::cpu {

template <typename T>
void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int IC, int OC,
                    const LinearLd& ld) {
  const int64_t ldx = ld.x ? ld.x : IC, ldw = ld.w ? ld.w : IC, ldo = ld.out ? ld.out : OC;
  gemm<T>(false, true, N, OC, IC, T(1), x, ldx, w, ldw, T(0), out, ldo);
  if (bias) bias_add_forward(out, bias, N, OC, ldo);
}

template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N,
                     int IC, int OC, bool accumulate_dx, const LinearLd& ld) {
  const int64_t ldx = ld.x ? ld.x : IC, ldw = ld.w ? ld.w : IC, ldo = ld.out ? ld.out : OC;
  const Bf16OperandReuse reuse;  // bf16: dout is converted once for both GEMMs
  if (dx)
    gemm<T>(false, false, N, IC, OC, T(1), dout, ldo, w, ldw, accumulate_dx ? T(1) : T(0), dx, ldx);
  if (dw) gemm<T>(true, false, OC, IC, N, T(1), dout, ldo, x, ldx, T(1), dw, ldw);
  if (dbias) bias_add_backward(dbias, dout, N, OC, ldo);
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int,
                                    int, const LinearLd&);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int, int, const LinearLd&);
template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int, int, bool, const LinearLd&);
template void linear_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int, int, bool, const LinearLd&);

}  // namespace strata::cpu
