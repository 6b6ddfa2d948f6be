// PAR, the approximation Layer Parallelism's study starts from ("Leveraging
// the true depth of LLMs", eq. 2 and section 3): the layers of a group read the same input x and
// their whole contributions are summed,
//   y = x + sum_i [A_i(x) + F_i(x + A_i(x))]
// (each MLP sees only its own layer's attention output). Groups of par_group
// layers (2: "2-parallel"; the run's length: a whole stretch in parallel).
// Streams inside a group: x_{2i+1} = t_i = x + A_i(x) (layer i's MLP input),
// x_{2i+2} = x; the group's last stream is y.
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void par_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int in = 2 * u.first;
  ops::Act<T> sum = f.module_out(2);
  for (int l = u.first; l < u.end(); ++l) {
    const int i = 2 * l + 1;
    ops::ActIn<T> x = f.stream(in);
    ops::Act<T> a = f.module_out(0);
    f.attention(l, x, a);
    f.add_o_bias(l, a);
    f.reduce_from_tp(a);
    ops::Act<T> t = f.stream(i);
    f.residual(t, x, a);
    ops::Act<T> m = f.module_out(1);
    f.mlp(l, t, m);
    f.reduce_from_tp(m);
    f.residual(m, m, a);  // layer l's contribution A_l(x) + F_l(t_l)
    if (l == u.first)
      f.copy(sum, m);
    else
      f.residual(sum, sum, m);
    if (l + 1 < u.end()) f.copy(f.stream(i + 1), f.stream(in));
  }
  f.residual(f.stream(2 * u.end()), f.stream(in), sum);
}

template <typename T>
void par_backward(UnitBackward<T>& b, const PlanUnit& u) {
  ops::Act<T> g = b.grad();     // dL/dy: the gradient of every contribution; becomes dL/dx
  ops::Act<T> acc = b.d_ln(1);  // what the group adds to dL/dx on top of dL/dy
  ops::Act<T> dt = b.d_ln(2);
  ops::Act<T> d = b.d_ln(0);
  b.zero(acc);
  for (int l = u.end() - 1; l >= u.first; --l) {
    const int i = 2 * l + 1;
    b.mlp_backward(l, g, d);
    b.copy_to_tp(d);
    b.zero(dt);
    b.mlp_norm_backward(l, b.stream(i), d, dt);  // dt = dL/dt_l
    b.add(acc, dt);                              // t_l = x + A_l(x)
    b.add(dt, g);                                // dL/dA_l = dL/dy + dL/dt_l
    b.o_bias_backward(l, dt);
    b.attention_backward(l, dt, d);
    b.copy_to_tp(d);
    b.attention_norm_backward(l, b.stream(2 * u.first), d, acc);
  }
  b.add(g, acc);
}

const KindInfo& par_kind() {
  static const KindInfo info{
      .name = "par",
      .kind = LayerKind::Par,
      .unit_size = 0,
      .summary =
          "PAR (Layer Parallelism's study): groups of par_group layers (default 2) on one input, y "
          "= x + sum of A_i(x) + F_i(x + A_i(x))",
      .example = "par*2,standard*2;par_group=2",
      .options = {{"par_group", 2, 1000, true, "layers per group (default 2)"}},
      .buffers = {.grad_slot_1 = true, .grad_slot_2 = true, .output_slot_2 = true},
      .inner_stream = false,
      .unit_noun = "par group",
      .f32 = {par_forward<float>, par_backward<float>},
      .f64 = {par_forward<double>, par_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
