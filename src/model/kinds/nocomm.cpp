// The communication-free upper bound of the Ladder paper: a standard layer
// whose module outputs are not reduced over the tensor-parallel group (each
// rank adds only its partial sum). Its outputs mean nothing under tp > 1; it
// exists to time a layer without communication, so only `strata bench` runs
// it (LayerPlan::check_not_benchmark_only). At tp = 1 it equals standard.
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void nocomm_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  ops::Act<T> a = f.module_out(0);
  f.attention(l, f.stream(i - 1), a);
  f.add_o_bias(l, a);
  f.residual(f.stream(i), f.stream(i - 1), a);
  ops::Act<T> m = f.module_out(1);
  f.mlp(l, f.stream(i), m);
  f.residual(f.stream(i + 1), f.stream(i), m);
}

template <typename T>
void nocomm_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  ops::Act<T> g = b.grad();
  ops::Act<T> d_ln = b.d_ln();
  b.mlp_backward(l, g, d_ln);
  b.mlp_norm_backward(l, b.stream(i), d_ln, g);
  b.o_bias_backward(l, g);
  b.attention_backward(l, g, d_ln);
  b.attention_norm_backward(l, b.stream(i - 1), d_ln, g);
}

const KindInfo& nocomm_kind() {
  static const KindInfo info{
      .name = "nocomm",
      .kind = LayerKind::NoComm,
      .unit_size = 1,
      .summary =
          "a standard layer without its all-reduces: the communication-free speed bound "
          "(benchmarks only)",
      .example = "nocomm*4",
      .benchmark_only = true,
      .cost = {.attention_sum = false, .mlp_sum = false},
      .f32 = {nocomm_forward<float>, nocomm_backward<float>},
      .f64 = {nocomm_forward<double>, nocomm_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
