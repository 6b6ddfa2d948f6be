#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace strata {

template <typename T>
AdamW<T>::AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg,
                std::vector<bool> trainable, std::vector<bool> owned)
    : be_(be), layout_(layout), cfg_(cfg) {
  const size_t n = layout.tensors().size();
  if (trainable.empty()) trainable.assign(n, true);
  if (owned.empty()) owned.assign(n, true);
  STRATA_CHECK(trainable.size() == n && owned.size() == n, "AdamW: masks have ", trainable.size(),
               "/", owned.size(), " entries for ", n, " tensors");
  trainable_ = trainable;
  offset_.assign(n, -1);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i)
    if (trainable[i] && owned[i]) {
      offset_[i] = total;
      total += (layout[int(i)].numel + 15) / 16 * 16;
    }
  m_ = ops::DeviceBuffer<T>(&be, size_t(total));
  v_ = ops::DeviceBuffer<T>(&be, size_t(total));
  squares_ = {be.alloc_scalars(2), [&be](double* p) { be.free_scalars(p); }};
}

template <typename T>
double AdamW<T>::step(T* params, T* grads, double lr) {
  const auto& tensors = layout_.tensors();
  double* acc = squares_.get();  // [split, replicated]
  be_.zero_scalars(acc, 2);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (trainable_[i])
      be_.sum_squares(acc + (tensors[i].split_dim >= 0 ? 0 : 1), grads + tensors[i].offset,
                      tensors[i].numel);
  double squares[2];
  be_.read_scalars(squares, acc, 2);  // the step's one host read of the norm
  double split = squares[0];
  const double replicated = squares[1];
  if (tp_) split = tp_->allreduce_sum(split);
  const double norm = std::sqrt(split + replicated);
  if (!std::isfinite(norm)) return norm;
  const double clip = cfg_.grad_clip > 0 ? ops::clip_coefficient(norm, cfg_.grad_clip) : 1.0;
  ++step_;
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = cfg_.beta1;
  s.beta2 = cfg_.beta2;
  s.eps = cfg_.eps;
  s.step = step_;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (offset_[i] < 0) continue;  // frozen, or owned by another data-parallel rank
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
