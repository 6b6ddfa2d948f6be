// A pruned layer: both of its streams are the layer's input, and the gradient
// passes through unchanged. Its weights stay in the model and get no gradient.
#include "model/kinds/kinds.h"

namespace strata::kinds {

template <typename T>
void skip_forward(UnitForward<T>& f, const PlanUnit& u) {
  const int i = 2 * u.first + 1;
  f.copy(f.stream(i), f.stream(i - 1));
  f.copy(f.stream(i + 1), f.stream(i - 1));
}

// x_{2l+1} is a copy of the input too: what a later layer's deferred input
// gradient adds to it (a ladder layer reads it) joins the running gradient.
template <typename T>
void skip_backward(UnitBackward<T>& b, const PlanUnit& u) {
  b.settle(2 * u.first + 1);
}

template void skip_forward<float>(UnitForward<float>&, const PlanUnit&);
template void skip_forward<double>(UnitForward<double>&, const PlanUnit&);
template void skip_backward<float>(UnitBackward<float>&, const PlanUnit&);
template void skip_backward<double>(UnitBackward<double>&, const PlanUnit&);

}  // namespace strata::kinds
