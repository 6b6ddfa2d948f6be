// Full tensors from tensor-parallel parts and back: checkpoints hold full
// (layout-independent) tensors, so a run saved at one tp degree resumes at
// another. A split tensor's part is a block of rows (split_dim 0) or of
// columns (split_dim 1) of the full tensor (ParamLayout).
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"
#include "parallel/comm.h"

namespace strata {

// Element count of tensor t's full tensor.
int64_t full_numel(const ParamInfo& p);

// Writes this rank's part of tensor t (layout's tp_rank) from the full tensor.
void slice_full_tensor(const ParamLayout& layout, int t, const float* full, float* part);

// Collective over the tensor-parallel group `tp` (every member calls it for
// the same t): gathers every rank's part of tensor t into `full` on every
// rank. Replicated tensors (and tp = 1) are copied.
void gather_full_tensor(const ParamLayout& layout, int t, const float* part, float* full,
                        Communicator& tp);

}  // namespace strata
