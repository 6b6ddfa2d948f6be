// The parallel attention + MLP layer (GPT-J, PaLM; the Ladder paper's
// comparison variant): both modules read one normalisation of the layer's
// input (the attention's norm weights; post_attention_layernorm is unused and
// gets no gradient), their partial outputs are summed on each rank and
// reduced once, so a layer costs one all-reduce instead of two, forward and
// backward.
//   x_{2l+2} = x_{2l} + reduce_from_tp(attn_l(n) + mlp_l(n) (+ o bias)),  n = norm_attn(x_{2l})
//   x_{2l+1} := x_{2l+2} (no stream inside the layer)
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void parallel_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  ops::Act<T> a = f.module_out(0);
  ops::Act<T> m = f.module_out(1);
  f.attention(l, f.stream(i - 1), a);
  f.mlp_shared_norm(l, f.stream(i - 1), m);
  f.residual(a, a, m);
  f.add_o_bias(l, a);
  f.reduce_from_tp(a);
  f.residual(f.stream(i + 1), f.stream(i - 1), a);
  f.copy(f.stream(i), f.stream(i + 1));
}

template <typename T>
void parallel_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  ops::Act<T> g = b.grad();  // dL/dx_{i+1}; becomes dL/dx_{i-1}
  b.settle(i);               // x_i is a copy of x_{i+1} (a ladder layer above may read it)
  b.o_bias_backward(l, g);
  ops::Act<T> d_attn = b.d_ln(0);
  ops::Act<T> d_mlp = b.d_ln(1);
  b.mlp_backward(l, g, d_mlp);
  b.attention_backward(l, g, d_attn);
  b.add(d_attn, d_mlp);  // both read the same normalised input
  b.copy_to_tp(d_attn);
  b.attention_norm_backward(l, b.stream(i - 1), d_attn, g);
}

const KindInfo& parallel_kind() {
  static const KindInfo info{
      .name = "parallel",
      .kind = LayerKind::Parallel,
      .unit_size = 1,
      .summary = "x + attn(n) + mlp(n) with one shared norm n and one all-reduce per layer (PaLM)",
      .example = "parallel*2,standard*2",
      .buffers = {.grad_slot_1 = true},
      .cost = {.attention_sum = false},
      .f32 = {parallel_forward<float>, parallel_backward<float>},
      .f64 = {parallel_forward<double>, parallel_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
