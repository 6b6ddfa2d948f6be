// The plan kinds, one file each (model/kinds/<name>.cpp): each file holds its
// rule, forward and backward against model/unit.h, and its row,
// `<name>_kind()` (model/plan.h, KindInfo). kinds.cpp gathers the rows into
// kind_table() and dispatches a unit to its kind's code. Adding a kind: its
// line in kinds.def, its file, its tests (docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.h"
#include "model/unit.h"

namespace strata {

// spd.cpp: spd_degree g against the model (it divides the heads, KV heads and
// MLP width) and the tp degree (a multiple of it); one-line error naming the plan.
void check_spd_degree(const LlamaConfig& cfg, int g, int tp, const std::string& plan_text);
// spd.cpp: the plan with the layers in `spd` as spd blocks of degree g, the
// rest standard ("standard,spd*2;spd_degree=4").
std::string spd_plan_text(int layers, const std::vector<bool>& spd, int g);

}  // namespace strata

namespace strata::kinds {

#define STRATA_KIND(Enum, name) const KindInfo& name##_kind();
#include "model/kinds/kinds.def"
#undef STRATA_KIND

// standard.cpp: the standard computation of layer l's weights between
// streams i - 1 and i + 1 (i = 2l + 1 in place; elsewhere for the shuffle
// kind; SPD of degree 1).
template <typename T>
void standard_layer_forward(UnitForward<T>& f, int l, int i);
template <typename T>
void standard_layer_backward(UnitBackward<T>& b, int l, int i);

// shuffle.cpp: the run's layers in the order shuffle_permutation() gives for
// the pass (position j of the run runs layer first + perm[j]).
std::vector<int> shuffle_permutation(uint64_t seed, int first, int n, uint64_t pass);

}  // namespace strata::kinds
