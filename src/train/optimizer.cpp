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
  offset_.assign(n, -1);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!trainable[i]) continue;
    const ParamInfo& t = layout[int(i)];
    Piece p;
    p.tensor = int(i);
    p.param_offset = p.grad_offset = t.offset;
    p.numel = t.numel;
    if (owned[i]) {
      offset_[i] = p.moment_offset = total;
      total += (t.numel + 15) / 16 * 16;
    }
    pieces_.push_back(p);
  }
  m_ = ops::DeviceBuffer<T>(&be, size_t(total));
  v_ = ops::DeviceBuffer<T>(&be, size_t(total));
  squares_ = {be.alloc_scalars(3), [&be](double* p) { be.free_scalars(p); }};
}

template <typename T>
AdamW<T>::AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg,
                std::vector<Piece> pieces, int64_t moment_elements, Communicator* dp)
    : be_(be), layout_(layout), cfg_(cfg), pieces_(std::move(pieces)), dp_(dp) {
  offset_.assign(layout.tensors().size(), -1);
  for (Piece& p : pieces_) {
    STRATA_CHECK(p.grad_offset >= 0 && p.grad_offset + p.numel <= moment_elements,
                 "AdamW: a piece of ", layout[p.tensor].name, " lies outside the moment arenas");
    p.moment_offset = p.grad_offset;
  }
  m_ = ops::DeviceBuffer<T>(&be, size_t(moment_elements));
  v_ = ops::DeviceBuffer<T>(&be, size_t(moment_elements));
  squares_ = {be.alloc_scalars(3), [&be](double* p) { be.free_scalars(p); }};
}

template <typename T>
double AdamW<T>::step(T* params, T* grads, double lr) {
  double* acc = squares_.get();  // [split, replicated, not counted here]
  be_.zero_scalars(acc, 3);
  for (const Piece& p : pieces_) {
    const bool counted = counted_.empty() || counted_[size_t(p.tensor)];
    be_.sum_squares(acc + (!counted                           ? 2
                           : layout_[p.tensor].split_dim >= 0 ? 0
                                                              : 1),
                    grads + p.grad_offset, p.numel);
  }
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = cfg_.beta1;
  s.beta2 = cfg_.beta2;
  s.eps = cfg_.eps;
  s.step = step_ + 1;
  const bool local = !dp_ && !tp_ && !pp_;
  double norm = 0;
  if (local) {
    // The update computes the clipping factor from the sums where it runs,
    // queued right behind them; the norm is read once everything is queued.
    s.squares = acc;
    s.max_norm = cfg_.grad_clip;
  } else {
    // The sums of squares cross ranks on the host first.
    double squares[2];
    be_.read_scalars(squares, acc, 2);
    double split = squares[0];
    double replicated = squares[1];
    if (dp_) {  // ZeRO-2/3: each rank holds a slice of every gradient
      split = dp_->allreduce_sum(split);
      replicated = dp_->allreduce_sum(replicated);
    }
    if (tp_) split = tp_->allreduce_sum(split);
    double total = split + replicated;
    if (pp_) total = pp_->allreduce_sum(total);  // every stage's tensors
    norm = std::sqrt(total);
    if (!std::isfinite(norm)) return norm;
    s.clip = cfg_.grad_clip > 0 ? ops::clip_coefficient(norm, cfg_.grad_clip) : 1.0;
  }
  for (const Piece& p : pieces_) {
    if (p.moment_offset < 0) continue;  // owned by another data-parallel rank
    s.weight_decay = layout_[p.tensor].is_matrix ? cfg_.weight_decay : 0.0;
    be_.adamw_update(params + p.param_offset, grads + p.grad_offset, m_.data() + p.moment_offset,
                     v_.data() + p.moment_offset, p.numel, s);
  }
  if (local) {
    double squares[2];
    be_.read_scalars(squares, acc, 2);  // the step's one host read, after the update is queued
    norm = std::sqrt(squares[0] + squares[1]);
    if (!std::isfinite(norm)) return norm;  // the update skipped itself
  }
  ++step_;
  return norm;
}

std::unique_ptr<AdamW<float>> make_sharded_adamw(ops::Backend<float>& be, const ParamLayout& layout,
                                                 const AdamWConfig& cfg, ZeroShards& store,
                                                 const std::vector<bool>& trainable) {
  std::vector<AdamW<float>::Piece> pieces;
  for (const ZeroShards::Piece& q : store.pieces(trainable)) {
    AdamW<float>::Piece p;
    p.tensor = q.tensor;
    p.param_offset = store.stage() == 3 ? q.shard_offset : q.arena_offset;
    p.grad_offset = q.shard_offset;
    p.numel = q.numel;
    pieces.push_back(p);
  }
  return std::make_unique<AdamW<float>>(be, layout, cfg, std::move(pieces), store.shard_elements(),
                                        &store.dp());
}

double sharded_step(AdamW<float>& opt, ZeroShards& store, float* arena, double lr) {
  store.finish_gradients();
  const double norm =
      opt.step(store.stage() == 3 ? store.weight_shard() : arena, store.gradient_shard(), lr);
  store.publish_weights(arena);
  return norm;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace strata
