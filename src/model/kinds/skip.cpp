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

const KindInfo& skip_kind() {
  static const KindInfo info{
      .name = "skip",
      .kind = LayerKind::Skip,
      .unit_size = 1,
      .summary = "the layer is bypassed (pruned)",
      .example = "standard,skip,standard*2",
      .cost = {.computes = false, .attention_sum = false, .mlp_sum = false},
      .f32 = {skip_forward<float>, skip_backward<float>},
      .f64 = {skip_forward<double>, skip_backward<double>},
  };
  return info;
}

}  // namespace strata::kinds
