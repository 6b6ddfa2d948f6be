// Dispatch of a plan unit to its kind's code.
#include "model/kinds/kinds.h"

namespace strata {

template <typename T>
void unit_forward(UnitForward<T>& f, const PlanUnit& u) {
  switch (u.kind) {
    case LayerKind::Standard:
      return kinds::standard_forward(f, u);
    case LayerKind::Skip:
      return kinds::skip_forward(f, u);
    case LayerKind::Ladder:
      return kinds::ladder_forward(f, u);
    case LayerKind::Parallel:
      return kinds::parallel_forward(f, u);
    case LayerKind::NoComm:
      return kinds::nocomm_forward(f, u);
    case LayerKind::Lp:
      return kinds::lp_forward(f, u);
    case LayerKind::Par:
      return kinds::par_forward(f, u);
    case LayerKind::Shuffle:
      return kinds::shuffle_forward(f, u);
    case LayerKind::Spd:
      return kinds::spd_forward(f, u);
  }
}

template <typename T>
void unit_backward(UnitBackward<T>& b, const PlanUnit& u) {
  switch (u.kind) {
    case LayerKind::Standard:
      return kinds::standard_backward(b, u);
    case LayerKind::Skip:
      return kinds::skip_backward(b, u);
    case LayerKind::Ladder:
      return kinds::ladder_backward(b, u);
    case LayerKind::Parallel:
      return kinds::parallel_backward(b, u);
    case LayerKind::NoComm:
      return kinds::nocomm_backward(b, u);
    case LayerKind::Lp:
      return kinds::lp_backward(b, u);
    case LayerKind::Par:
      return kinds::par_backward(b, u);
    case LayerKind::Shuffle:
      return kinds::shuffle_backward(b, u);
    case LayerKind::Spd:
      return kinds::spd_backward(b, u);
  }
}

template void unit_forward<float>(UnitForward<float>&, const PlanUnit&);
template void unit_forward<double>(UnitForward<double>&, const PlanUnit&);
template void unit_backward<float>(UnitBackward<float>&, const PlanUnit&);
template void unit_backward<double>(UnitBackward<double>&, const PlanUnit&);

}  // namespace strata
