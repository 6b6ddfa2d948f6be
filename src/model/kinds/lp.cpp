// Layer Parallelism ("Leveraging the true depth of LLMs", anonymous authors):
// the two layers of a pair (k, k+1) read the same input. Both attentions
// (each with its own norm) are summed by one reduction, then both MLPs read
// the same stream normed with the mixed weight lp_alpha * g_k +
// (1 - lp_alpha) * g_{k+1} and are summed by a second one:
//   h = x + attn_k(x) + attn_{k+1}(x),  y = h + mlp_k(u) + mlp_{k+1}(u)
// Streams: x = x_{2k}, x_{2k+1} = x_{2k+2} = x_{2k+3} := h, x_{2k+4} = y.
// Under tensor parallelism the pair's layers live on the two halves of the
// group (LayerPlan::tp_shards; tp 2: one whole layer per rank, with its KV
// cache): a rank computes its layer's partials and zeros for the other's, so a
// pair costs a rank the work of one layer and two reductions instead of four.
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void lp_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int k = u.first, i = 2 * k + 1;
  const double alpha = f.plan().number("lp_alpha", 0.5);
  ops::Act<T> a = f.module_out(0);
  ops::Act<T> b = f.module_out(1);
  ops::ActIn<T> x = f.stream(i - 1);
  f.attention(k, x, a);
  f.attention(k + 1, x, b);
  f.residual(a, a, b);
  f.add_o_bias(k, a);
  f.add_o_bias(k + 1, a);
  f.reduce_from_tp(a);
  ops::Act<T> h = f.stream(i);
  f.residual(h, f.stream(i - 1), a);
  f.copy(f.stream(i + 1), h);
  f.copy(f.stream(i + 2), h);
  h = f.stream(i);  // (the generation engine keeps streams in a ring: re-read)
  f.mlp_mixed_norm(k, k, k + 1, alpha, h, a);
  f.mlp_mixed_norm(k + 1, k, k + 1, alpha, h, b);
  f.residual(a, a, b);
  f.reduce_from_tp(a);
  f.residual(f.stream(i + 3), h, a);
}

template <typename T>
void lp_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const int k = u.first, i = 2 * k + 1;
  const double alpha = b.plan().number("lp_alpha", 0.5);
  ops::Act<T> g = b.grad();  // dL/dy; becomes dL/dh, then dL/dx
  ops::Act<T> d0 = b.d_ln(0);
  ops::Act<T> d1 = b.d_ln(2);  // slot 1 may hold a ladder layer's input gradient to h until settled
  b.mlp_backward(k, g, d0);
  b.mlp_backward(k + 1, g, d1);
  // x_{2k+1..2k+3} are copies of h: what later layers read of them joins dL/dh.
  for (int s = i + 2; s >= i; --s) b.settle(s);
  b.add(d0, d1);  // both MLPs read the same normed stream
  b.copy_to_tp(d0);
  b.mlp_mixed_norm_backward(k, k, k + 1, alpha, b.stream(i), d0, g);
  b.o_bias_backward(k, g);
  b.o_bias_backward(k + 1, g);
  b.attention_backward(k, g, d0);
  b.attention_backward(k + 1, g, d1);
  b.copy_to_tp(d0);
  b.copy_to_tp(d1);
  ops::ActIn<T> x = b.stream(i - 1);
  b.attention_norm_backward(k, x, d0, g);
  b.attention_norm_backward(k + 1, x, d1, g);
}

const KindInfo& lp_kind() {
  static const KindInfo info{
      .name = "lp",
      .kind = LayerKind::Lp,
      .unit_size = 2,
      .summary =
          "Layer Parallelism: a pair of layers on one input, attentions summed, then both MLPs on "
          "one norm (weights lp_alpha * first + (1 - lp_alpha) * second, default 0.5)",
      .example = "standard,lp*2,standard;lp_alpha=0.3",
      .options = {{"lp_alpha", 0.0, 1.0, false,
                   "the mixed MLP norm's weight on the first layer (default 0.5)"}},
      .buffers = {.grad_slot_2 = true},
      .pair_on_tp_halves = true,
      .cost = {.recovery = KindCost::Recovery::FineTune},
      .f32 = {lp_forward<float>, lp_backward<float>},
      .f64 = {lp_forward<double>, lp_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
