// Linear layer y = x W^T (+ b) with W stored [out, in] as in Hugging Face; the
// bias is bias.cpp's add. In bf16 storage with native bf16 matmuls the GEMMs
// read the bf16 activations as they are stored (gemm_act); otherwise they run
// on fp32 copies (Staged, storage.h), which the bf16 matmul path rounds to
// bf16 again: the same product either way. Outputs are fp32 GEMM results
// rounded into bf16 storage.
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"

namespace strata::cpu {
namespace {
struct Tag {};

// Elements of an activation view of N rows ld apart: (N - 1) ld + width.
int64_t view_elements(int64_t N, int64_t ld, int64_t width) { return N ? (N - 1) * ld + width : 0; }

// A GEMM's input activation: a itself where the GEMMs read its storage, else
// an fp32 copy in workspace slot Slot.
template <typename T, int Slot>
class GemmIn {
 public:
  GemmIn(ActIn<T> a, int64_t n)
      : direct_(a && reads(a)), a_(a), staged_(direct_ ? nullptr : a, n) {}
  ActIn<T> get() const { return direct_ ? a_ : ActIn<T>(staged_.get()); }

 private:
  static bool reads(ActIn<T> a) {
    if constexpr (std::is_same_v<T, float>) return a.is_bf16() && gemm_reads_bf16();
    return false;
  }
  bool direct_;
  ActIn<T> a_;
  StagedIn<T, Slot, Tag> staged_;
};
}  // namespace

template <typename T>
void linear_forward(Act<T> out_, ActIn<T> x_, const T* w, const T* bias, int64_t N, int IC, int OC,
                    const LinearLd& ld) {
  const int64_t ldx = ld.x ? ld.x : IC, ldw = ld.w ? ld.w : IC, ldo = ld.out ? ld.out : OC;
  const GemmIn<T, 0> x(x_, view_elements(N, ldx, IC));
  // A strided output view keeps the columns it does not cover: read it in.
  const Staged<T, 1, Tag> out(out_, view_elements(N, ldo, OC), ldo != OC);
  gemm_act(false, true, N, OC, IC, T(1), x.get(), ldx, w, ldw, T(0), out.get(), ldo);
  if (bias) bias_add_forward<T>(out.get(), bias, N, OC, ldo);
}

template <typename T>
void linear_backward(Act<T> dx_, T* dw, T* dbias, ActIn<T> dout_, ActIn<T> x_, const T* w,
                     int64_t N, int IC, int OC, bool accumulate_dx, const LinearLd& ld) {
  const int64_t ldx = ld.x ? ld.x : IC, ldw = ld.w ? ld.w : IC, ldo = ld.out ? ld.out : OC;
  const GemmIn<T, 2> dout(dout_, view_elements(N, ldo, OC));
  const GemmIn<T, 0> x(dw ? x_ : ActIn<T>(), view_elements(N, ldx, IC));
  const Staged<T, 1, Tag> dx(dx_, view_elements(N, ldx, IC), accumulate_dx || ldx != IC);
  const Bf16OperandReuse reuse;  // bf16: an fp32 dout is converted once for both GEMMs
  if (dx_)
    gemm_act(false, false, N, IC, OC, T(1), dout.get(), ldo, w, ldw, accumulate_dx ? T(1) : T(0),
             dx.get(), ldx);
  if (dw) gemm_act(true, false, OC, IC, N, T(1), dout.get(), ldo, x.get(), ldx, T(1), dw, ldw);
  if (dbias) bias_add_backward<T>(dbias, dout.get(), N, OC, ldo);
}

STRATA_CPU_INSTANTIATE(linear_forward)
STRATA_CPU_INSTANTIATE(linear_backward)

}  // namespace strata::cpu
