// Ladder Residual (Muru Zhang, Mayank Mishra et al., ICML 2025): every module reads the stream
// from two modules back, x_i = x_{i-1} + reduce_from_tp(h_i(x_{i-2})), with
// x_{-1} := x_0. The reductions are started asynchronously and their residual
// adds deferred, so the all-reduce of module i runs while module i+1 computes
// (module i+1 reads x_{i-1}, which does not need it). The executor adds a
// pending output when its stream is first read, by the next ladder layer's
// attention, a standard module, an exit or the head.
//   attention of layer l (module i = 2l+1): reads x_{max(i-2, 0)}, x_i = x_{i-1} + AR(a)
//   MLP of layer l (module i+1):            reads x_{i-1},          x_{i+1} = x_i + AR(m)
// Backward mirrors it: the input gradient of module j flows into x_{j-2}; its
// copy_to_tp all-reduce runs while module j-1's backward computes and is
// added to the running gradient when the walk reaches x_{j-2}.
#include <algorithm>

#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void ladder_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  ops::Act<T> a = f.module_out(0);
  f.attention(l, f.stream(std::max(i - 2, 0)), a);
  f.add_o_bias(l, a);
  f.defer_residual(i, i - 1, a, f.reduce_from_tp_async(a));
  ops::Act<T> m = f.module_out(1);
  f.mlp(l, f.stream(i - 1), m);
  f.defer_residual(i + 1, i, m, f.reduce_from_tp_async(m));
}

template <typename T>
void ladder_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  ops::Act<T> g =
      b.grad();  // dL/dx_{i+1} (settled by the executor); leaves as the rest of dL/dx_{i-1}
  // The MLP's input gradient waits in slot 0 until the unit below starts
  // (it settles x_{i-1} first); the attention's in slot 1, past a standard
  // unit's use of slot 0, until that unit reaches x_{i-2}.
  ops::Act<T> d_mlp = b.d_ln(0);
  b.mlp_backward(l, g, d_mlp);
  b.defer_input_grad(i - 1, l, true, d_mlp, b.copy_to_tp_async(d_mlp));
  b.settle(i);  // g = dL/dx_i: the next layer's attention read x_i
  b.o_bias_backward(l, g);
  ops::Act<T> d_attn = b.d_ln(1);
  b.attention_backward(l, g, d_attn);
  b.defer_input_grad(std::max(i - 2, 0), l, false, d_attn, b.copy_to_tp_async(d_attn));
}

const KindInfo& ladder_kind() {
  static const KindInfo info{
      .name = "ladder",
      .kind = LayerKind::Ladder,
      .unit_size = 1,
      .summary =
          "x_i = x_{i-1} + h_i(x_{i-2}) per module (Ladder Residual: all-reduces overlap the next "
          "module)",
      .example = "standard,ladder*3",
      .buffers = {.grad_slot_1 = true},
      .reads_stream_below = true,
      .cost = {.reads_two_back = true, .recovery = KindCost::Recovery::FineTune},
      .f32 = {ladder_forward<float>, ladder_backward<float>},
      .f64 = {ladder_forward<double>, ladder_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
