#include "train/optimizer.h"

#include <cmath>

namespace strata {

template <typename T>
AdamW<T>::AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg)
    : be_(be), layout_(layout), cfg_(cfg), m_(&be, layout.total()), v_(&be, layout.total()) {}

template <typename T>
double AdamW<T>::step(T* params, T* grads, double lr) {
  // The alignment gaps between tensors hold zeros, so the whole arena can be
  // reduced and scaled in one pass.
  const double norm = std::sqrt(be_.sum_squares(grads, layout_.total()));
  if (cfg_.grad_clip > 0) {
    const double k = cpu::clip_coefficient(norm, cfg_.grad_clip);
    if (k < 1.0) be_.scale_inplace(grads, layout_.total(), k);
  }
  ++step_;
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = cfg_.beta1;
  s.beta2 = cfg_.beta2;
  s.eps = cfg_.eps;
  s.step = step_;
  for (const ParamInfo& t : layout_.tensors()) {
    s.weight_decay = t.is_matrix ? cfg_.weight_decay : 0.0;
    be_.adamw_update(params + t.offset, grads + t.offset, m_.data() + t.offset,
                     v_.data() + t.offset, t.numel, s);
  }
  return norm;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace strata
