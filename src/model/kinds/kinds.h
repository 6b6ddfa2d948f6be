// The layer kinds, one file each. Adding a kind: a table entry in
// model/plan.cpp, its file here with <kind>_forward / <kind>_backward, and a
// case in kinds.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "model/unit.h"

namespace strata::kinds {

// standard.cpp: x_i = x_{i-1} + reduce_from_tp(h_i(x_{i-1})), o_proj bias
// added on one rank before the reduction.
template <typename T>
void standard_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void standard_backward(UnitBackward<T>& b, const PlanUnit& u);
// The standard computation of layer l's weights between streams i - 1 and
// i + 1 (i = 2l + 1 in place; elsewhere for the shuffle kind).
template <typename T>
void standard_layer_forward(UnitForward<T>& f, int l, int i);
template <typename T>
void standard_layer_backward(UnitBackward<T>& b, int l, int i);

// skip.cpp: the layer is bypassed.
template <typename T>
void skip_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void skip_backward(UnitBackward<T>& b, const PlanUnit& u);

// ladder.cpp: x_i = x_{i-1} + reduce_from_tp(h_i(x_{i-2})), the reductions
// deferred so each overlaps the next module.
template <typename T>
void ladder_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void ladder_backward(UnitBackward<T>& b, const PlanUnit& u);

// parallel.cpp: attention and MLP side by side on one shared norm, one
// reduction per layer.
template <typename T>
void parallel_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void parallel_backward(UnitBackward<T>& b, const PlanUnit& u);

// nocomm.cpp: the standard layer without reductions (benchmarks only).
template <typename T>
void nocomm_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void nocomm_backward(UnitBackward<T>& b, const PlanUnit& u);

// lp.cpp: Layer Parallelism, a pair of layers on one input (two reductions).
template <typename T>
void lp_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void lp_backward(UnitBackward<T>& b, const PlanUnit& u);

// par.cpp: PAR groups (Layer Parallelism's study): y = x + sum_i [A_i(x) +
// F_i(x + A_i(x))], two reductions per layer.
template <typename T>
void par_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void par_backward(UnitBackward<T>& b, const PlanUnit& u);

// shuffle.cpp: the run's layers in the order shuffle_permutation() gives for
// the pass (position j of the run runs layer first + perm[j]).
std::vector<int> shuffle_permutation(uint64_t seed, int first, int n, uint64_t pass);
template <typename T>
void shuffle_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void shuffle_backward(UnitBackward<T>& b, const PlanUnit& u);

// spd.cpp: SPD, the attention all-reduce dropped (one reduction per layer,
// spd_degree ranks real or virtual).
template <typename T>
void spd_forward(UnitForward<T>& f, const PlanUnit& u);
template <typename T>
void spd_backward(UnitBackward<T>& b, const PlanUnit& u);

}  // namespace strata::kinds
