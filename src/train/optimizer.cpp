#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace strata {

template <typename T>
AdamW<T>::AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg,
                std::vector<bool> trainable)
    : be_(be), layout_(layout), cfg_(cfg) {
  const size_t n = layout.tensors().size();
  if (trainable.empty()) trainable.assign(n, true);
  STRATA_CHECK(trainable.size() == n, "AdamW: trainable mask has ", trainable.size(),
               " entries for ", n, " tensors");
  offset_.assign(n, -1);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i)
    if (trainable[i]) {
      offset_[i] = total;
      total += (layout[int(i)].numel + 15) / 16 * 16;
    }
  m_ = ops::DeviceBuffer<T>(&be, size_t(total));
  v_ = ops::DeviceBuffer<T>(&be, size_t(total));
}

template <typename T>
double AdamW<T>::step(T* params, T* grads, double lr) {
  const auto& tensors = layout_.tensors();
  double sq = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (offset_[i] >= 0) sq += be_.sum_squares(grads + tensors[i].offset, tensors[i].numel);
  const double norm = std::sqrt(sq);
  const double clip = cfg_.grad_clip > 0 ? cpu::clip_coefficient(norm, cfg_.grad_clip) : 1.0;
  ++step_;
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = cfg_.beta1;
  s.beta2 = cfg_.beta2;
  s.eps = cfg_.eps;
  s.step = step_;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (offset_[i] < 0) continue;
    const ParamInfo& t = tensors[i];
    if (clip < 1.0) be_.scale_inplace(grads + t.offset, t.numel, clip);
    s.weight_decay = t.is_matrix ? cfg_.weight_decay : 0.0;
    be_.adamw_update(params + t.offset, grads + t.offset, m_.data() + offset_[i],
                     v_.data() + offset_[i], t.numel, s);
  }
  return norm;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace strata
