// The standard Llama layer: every module reads the stream just before it and
// its output, reduced over the tp group, is added to that stream.
//   x_{2l+1} = x_{2l}   + reduce_from_tp(attn_l(x_{2l}) (+ o bias on one rank))
//   x_{2l+2} = x_{2l+1} + reduce_from_tp(mlp_l(x_{2l+1}))
// Backward: the residual passes the gradient through unchanged and each module
// adds its input gradient on top, after copy_to_tp sums the partial gradient
// of its normed input over the group.
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void standard_forward(UnitForward<T>& f, const PlanUnit& u) {
  standard_layer_forward(f, u.first, 2 * u.first + 1);
}

template <typename T>
void standard_backward(UnitBackward<T>& b, const PlanUnit& u) {
  standard_layer_backward(b, u.first, 2 * u.first + 1);
}

template <typename T>
void standard_layer_forward(UnitForward<T>& f, int l, int i) {
  ops::Act<T> a = f.module_out(0);
  f.attention(l, f.stream(i - 1), a);
  f.add_o_bias(l, a);
  f.reduce_from_tp(a);
  f.residual(f.stream(i), f.stream(i - 1), a);
  ops::Act<T> m = f.module_out(1);
  f.mlp(l, f.stream(i), m);
  f.reduce_from_tp(m);
  f.residual(f.stream(i + 1), f.stream(i), m);
}

template <typename T>
void standard_layer_backward(UnitBackward<T>& b, int l, int i) {
  ops::Act<T> g = b.grad();  // dL/dx_{i+1}; becomes dL/dx_{i-1}
  ops::Act<T> d_ln = b.d_ln();
  b.mlp_backward(l, g, d_ln);
  b.copy_to_tp(d_ln);
  b.mlp_norm_backward(l, b.stream(i), d_ln, g);
  b.o_bias_backward(l, g);
  b.attention_backward(l, g, d_ln);
  b.copy_to_tp(d_ln);
  b.attention_norm_backward(l, b.stream(i - 1), d_ln, g);
}

template void standard_layer_forward<float>(UnitForward<float>&, int, int);
template void standard_layer_forward<double>(UnitForward<double>&, int, int);
template void standard_layer_backward<float>(UnitBackward<float>&, int, int);
template void standard_layer_backward<double>(UnitBackward<double>&, int, int);

const KindInfo& standard_kind() {
  static const KindInfo info{
      .name = "standard",
      .kind = LayerKind::Standard,
      .unit_size = 1,
      .summary = "x + h(x) per module (the Llama layer)",
      .example = "standard*4",
      .f32 = {standard_forward<float>, standard_backward<float>},
      .f64 = {standard_forward<double>, standard_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
