// SPD, Sync-Point Drop (Kim et al., "Communication-efficient tensor
// parallelism via sync-point drop"): the all-reduce after the attention is
// dropped. Each of the spd_degree ranks (real tp ranks, or virtual ones when
// one process simulates several) feeds its MLP columns its own attention
// output: h_j = x + P_j (+ b); P_j goes into the block's one reduction with
// the MLP partials, and x and the o bias are added once after it:
//   out = x + reduce_from_tp(sum_j [P_j + MLP_j(h_j)]) + b
// (the paper's Figure 3, with and without bias). Degree 1 is the standard
// layer. The block has no common mid stream: x_{2l+1} := x_{2l}. Backward,
// each rank knows the gradient through its own heads and MLP inputs only, so
// the block's one reduction sums that (with the norm and bias gradients it
// makes partial) instead of the attention's normed-input gradient.
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void spd_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  if (f.plan().number("spd_degree", 2) == 1) return standard_layer_forward(f, l, i);
  const T* x = f.stream(i - 1);
  T* s = f.module_out(1);
  f.spd_block(l, x, s);
  f.add_o_bias(l, s);
  f.reduce_from_tp(s);
  f.copy(f.stream(i), f.stream(i - 1));
  f.residual(f.stream(i + 1), f.stream(i - 1), s);
}

template <typename T>
void spd_backward(UnitBackward<T>& b, const PlanUnit& u) {
  const int l = u.first, i = 2 * l + 1;
  if (b.plan().number("spd_degree", 2) == 1) return standard_layer_backward(b, l, i);
  T* g = b.grad();  // dL/dout; becomes dL/dx
  b.settle(i);      // x_{2l+1} is x_{2l}: what read it joins dL/dx
  b.settle(i - 1);
  b.o_bias_backward(l, g);
  b.spd_block_backward(l, g, g);  // the residual x passes g; the block adds the rest
}

template void spd_forward<float>(UnitForward<float>&, const PlanUnit&);
template void spd_forward<double>(UnitForward<double>&, const PlanUnit&);
template void spd_backward<float>(UnitBackward<float>&, const PlanUnit&);
template void spd_backward<double>(UnitBackward<double>&, const PlanUnit&);

}  // namespace strata::kinds
