// Linear layer y = x W^T (+ b) with W stored [out, in] as in Hugging Face; the
// bias is bias.cpp's add. bf16 storage runs the same GEMMs on fp32 copies of
// the activations (Staged, storage.h): the bf16 matmul path rounds them to
// bf16 again, which changes nothing, so only the outputs' rounding differs.
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"

namespace strata::cpu {
namespace {
struct Tag {};

// Elements of an activation view of N rows ld apart: (N - 1) ld + width.
int64_t view_elements(int64_t N, int64_t ld, int64_t width) { return N ? (N - 1) * ld + width : 0; }
}  // namespace

template <typename T>
void linear_forward(Act<T> out_, ActIn<T> x_, const T* w, const T* bias, int64_t N, int IC, int OC,
                    const LinearLd& ld) {
  const int64_t ldx = ld.x ? ld.x : IC, ldw = ld.w ? ld.w : IC, ldo = ld.out ? ld.out : OC;
  const StagedIn<T, 0, Tag> x(x_, view_elements(N, ldx, IC));
  // A strided output view keeps the columns it does not cover: read it in.
  const Staged<T, 1, Tag> out(out_, view_elements(N, ldo, OC), ldo != OC);
  gemm<T>(false, true, N, OC, IC, T(1), x.get(), ldx, w, ldw, T(0), out.get(), ldo);
  if (bias) bias_add_forward<T>(out.get(), bias, N, OC, ldo);
}

template <typename T>
void linear_backward(Act<T> dx_, T* dw, T* dbias, ActIn<T> dout_, ActIn<T> x_, const T* w,
                     int64_t N, int IC, int OC, bool accumulate_dx, const LinearLd& ld) {
  const int64_t ldx = ld.x ? ld.x : IC, ldw = ld.w ? ld.w : IC, ldo = ld.out ? ld.out : OC;
  const StagedIn<T, 2, Tag> dout(dout_, view_elements(N, ldo, OC));
  const StagedIn<T, 0, Tag> x(dw ? x_ : ActIn<T>(), view_elements(N, ldx, IC));
  const Staged<T, 1, Tag> dx(dx_, view_elements(N, ldx, IC), accumulate_dx || ldx != IC);
  const Bf16OperandReuse reuse;  // bf16: dout is converted once for both GEMMs
  if (dx_)
    gemm<T>(false, false, N, IC, OC, T(1), dout.get(), ldo, w, ldw, accumulate_dx ? T(1) : T(0),
            dx.get(), ldx);
  if (dw) gemm<T>(true, false, OC, IC, N, T(1), dout.get(), ldo, x.get(), ldx, T(1), dw, ldw);
  if (dbias) bias_add_backward<T>(dbias, dout.get(), N, OC, ldo);
}

STRATA_CPU_INSTANTIATE(linear_forward)
STRATA_CPU_INSTANTIATE(linear_backward)

}  // namespace strata::cpu
