#include "model/sharding.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

int64_t full_numel(const ParamInfo& p) {
  int64_t n = 1;
  for (int64_t d : p.full_shape) n *= d;
  return n;
}

namespace {

// Copies between part `index` of a split tensor (or a replicated tensor) and
// the full tensor: to_full moves part -> full.
void copy_part(const ParamInfo& p, int index, float* part, float* full, bool to_full) {
  if (p.numel == 0) return;
  if (p.split_dim <= 0) {
    float* f = full + (p.split_dim < 0 ? 0 : int64_t(index) * p.numel);
    if (to_full)
      std::copy(part, part + p.numel, f);
    else
      std::copy(f, f + p.numel, part);
    return;
  }
  const int64_t rows = p.shape[0], cols = p.shape[1], full_cols = p.full_shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    float* f = full + r * full_cols + int64_t(index) * cols;
    float* q = part + r * cols;
    if (to_full)
      std::copy(q, q + cols, f);
    else
      std::copy(f, f + cols, q);
  }
}

}  // namespace

void slice_full_tensor(const ParamLayout& layout, int t, const float* full, float* part) {
  copy_part(layout[t], layout[t].part, part, const_cast<float*>(full), false);
}

void gather_full_tensor(const ParamLayout& layout, int t, const float* part, float* full,
                        Communicator& tp) {
  const ParamInfo& p = layout[t];
  STRATA_CHECK(tp.size() == layout.tp(), "gather_full_tensor: communicator of ", tp.size(),
               " ranks for a layout of tp ", layout.tp());
  if (p.split_dim < 0 || tp.size() == 1) {
    std::copy(part, part + p.numel, full);
    return;
  }
  if (p.parts != tp.size()) {
    // Held by a subset of the ranks (a Layer-Parallel pair's layer): each
    // holder writes its block, the others zeros, and a sum assembles it.
    const int64_t n = full_numel(p);
    std::fill(full, full + n, 0.f);
    copy_part(p, p.part, const_cast<float*>(part), full, true);
    tp.allreduce_sum(full, n);
    return;
  }
  if (p.split_dim == 0) {  // rank order is row-block order: gather in place
    tp.allgather(part, full, p.numel);
    return;
  }
  std::vector<float> parts(size_t(p.numel) * size_t(tp.size()));
  tp.allgather(part, parts.data(), p.numel);
  for (int r = 0; r < tp.size(); ++r) copy_part(p, r, parts.data() + r * p.numel, full, true);
}

}  // namespace strata
