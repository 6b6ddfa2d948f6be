// The executor's walk (model.h): a forward pass over the plan's units, the
// backward in reverse with the ZeRO buckets opened and closed around each
// unit and the data-parallel hand-off of finished gradients, the head and its
// early exits, and the entry points (forward, backward, forward_backward,
// logits, hidden states, one block). The units themselves are model_units.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/philox.h"
#include "model/model.h"
#include "model/unit.h"

namespace strata {

template <typename T>
void Model<T>::exit_loss(int l, int B, int T_, double scale, LossResult* result) {
  OpenHead head(*this);
  const int64_t N = int64_t(B) * T_;
  int64_t n_valid = 0;
  const double sum = head_ce().forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &n_valid,
      streams_[2 * (l + 1)], param(layout_.final_norm), head_weight(), targets_.data(), N,
      cfg_.hidden_size, v_local(), cfg_.rms_norm_eps, scale);
  if (result) result->exit_loss_sum[size_t(l)] = sum;
}

template <typename T>
void Model<T>::embed(const int32_t* tokens, int64_t n, ops::Act<T> x) {
  // Vocab-parallel embedding: each rank looks up its own rows, zeros elsewhere.
  OpenHead head(*this);
  be_->embedding_forward(x, tokens, param(layout_.embed), n, cfg_.hidden_size, cfg_.vocab_size,
                         int64_t(tp_rank()) * v_local(), tp_.active() ? v_local() : -1);
  tp_.allreduce(x, n * cfg_.hidden_size);
}

template <typename T>
void Model<T>::begin_pass(int B, int T_) {
  have_forward_ = false;
  pass_ = next_pass_++;
  ensure_activations(B, T_);
  run_mode_.assign(size_t(cfg_.num_hidden_layers), RunMode::All);
  kept_.resize(size_t(cfg_.num_hidden_layers));
  pending_out_.clear();
}

template <typename T>
void Model<T>::run_forward(const int32_t* tokens, int B, int T_, int exit_layer,
                           const LayerSkipStep* skip) {
  STRATA_CHECK(!staged_, "this model holds a pipeline stage only: run it by stages");
  if (exit_layer < 0) exit_layer = cfg_.num_hidden_layers;
  plan_.check_exit(exit_layer, "exit layer");
  whole_passes();
  begin_pass(B, T_);
  block_unit_ = -1;
  const int64_t N = int64_t(B) * T_;
  tokens_.assign(tokens, tokens + N);
  embed(tokens, N, streams_[0]);
  forward_units(0, units_.size(), B, T_, exit_layer, skip);
  materialize(2 * cfg_.num_hidden_layers);  // every stream, before the head or an exit
}

template <typename T>
void Model<T>::forward_units(size_t k0, size_t k1, int B, int T_, int exit_layer,
                             const LayerSkipStep* skip) {
  const int L = cfg_.num_hidden_layers;
  const bool dropping = skip && !skip->keep.empty();
  if (dropping)
    STRATA_CHECK(int(skip->keep.size()) == L, "layer skip: keep masks for ", skip->keep.size(),
                 " layers, the model has ", L);
  for (size_t k = k0; k < k1; ++k) {
    const PlanUnit& u = units_[k];
    if (u.end() > exit_layer) break;
    // ZeRO-3: this unit's weights gathered (waited for), the next one's asked
    // for while this one computes, this one's freed after it.
    open_unit_weights(u);
    if (k + 1 < k1 && units_[k + 1].end() <= exit_layer) prefetch_unit_weights(units_[k + 1]);
    RunMode mode = RunMode::All;
    if (dropping) {  // a unit is dropped as a whole: its layers share one mask
      const auto& k = skip->keep[size_t(u.first)];
      STRATA_CHECK(int(k.size()) == B, "layer skip: keep mask of layer ", u.first, " has ",
                   k.size(), " entries for a batch of ", B);
      for (int l = u.first + 1; l < u.end(); ++l)
        STRATA_CHECK(skip->keep[size_t(l)] == k, "layer skip: layers ", u.first, " and ", l,
                     " form one unit but have different keep masks");
      std::vector<int>& kept = kept_[size_t(u.first)];
      kept.clear();
      for (int b = 0; b < B; ++b)
        if (k[size_t(b)]) kept.push_back(b);
      for (int l = u.first + 1; l < u.end(); ++l) kept_[size_t(l)] = kept;
      const int Bk = int(kept.size());
      mode = Bk == B                 ? RunMode::All
             : skip->dense_reference ? RunMode::Dense
             : Bk == 0               ? RunMode::None
                                     : RunMode::Gathered;
    }
    for (int l = u.first; l < u.end(); ++l) run_mode_[size_t(l)] = mode;
    unit_forward_mode(u, B, T_, mode);
    close_unit_weights(u);
  }
}

// Expects dstream_ to hold the gradient of the final stream x_2L (from the
// last layer's loss); early-exit losses add theirs on the way down.
template <typename T>
void Model<T>::run_backward(const int32_t* tokens, int B, int T_, const LayerSkipStep* skip,
                            LossResult* result, double dloss, size_t k0, size_t k1,
                            ops::Act<T> din) {
  const int64_t N = int64_t(B) * T_;
  const int L = cfg_.num_hidden_layers;
  k1 = std::min(k1, units_.size());
  // A pipeline chunk: its layers, whether the head (the last chunk, or exits
  // on its layers) and the embedding are its to finish.
  const int lo = units_[k0].first, hi = units_[k1 - 1].end();
  // Early exits below the last layer (weight > 0) add to the head's gradients.
  auto exit_weight = [&](int l) {
    return skip && !skip->exit_weight.empty() && l < L - 1 ? skip->exit_weight[size_t(l)] : 0.0;
  };
  bool exits = false;
  for (int l = lo; l + 1 < L && l < hi; ++l)
    if (exit_weight(l) > 0) {
      plan_.check_exit(l + 1, "an early-exit loss after layer");
      exits = true;
    }
  // The final norm and the head (when untied) end the arena: done now unless
  // early exits still add to them.
  if (!exits && hi == L) {
    grad_ready(layout_.final_norm, int(layout_.tensors().size()) - 1);
    close_grads(head_bucket());
  }
  // A unit's gradients are complete once no deferred input gradient of its
  // layers is pending (their norm weights' gradients come with it).
  pending_grad_.clear();
  if (hi < L && boundary_streams(hi) == 2)  // the next stage's gradient of x_{2hi-1}
    pending_grad_.push_back({2 * hi - 1, -1, false, d_boundary_, -1, N});
  const bool head_open = hi == L || exits;
  std::vector<PlanUnit> waiting;
  // Units whose weights and gradient buckets are open (ZeRO-2/3), by first layer.
  std::vector<bool> opened(size_t(L), false);
  // With kinds that defer an input gradient (Ladder), the unit just run is
  // released only after the unit below it has run, whether or not it has a
  // gradient pending: a unit that LayerSkip dropped on one data-parallel rank
  // leaves none pending there, and the ranks' weight stores must still issue
  // their collectives (ZeRO-3's gathers, the reduce-scatters) in one order.
  const bool deferring = plan_.buffers().grad_slot_1;
  int just_run = -1;
  auto release = [&](bool all) {
    for (size_t k = 0; k < waiting.size();) {
      const PlanUnit w = waiting[k];
      const bool busy = (deferring && !all && w.first == just_run) ||
                        std::any_of(pending_grad_.begin(), pending_grad_.end(), [&](const auto& p) {
                          return p.layer >= w.first && p.layer < w.end();
                        });
      if (busy && !all) {
        ++k;
        continue;
      }
      grad_ready(layout_.layers[size_t(w.first)].input_norm,
                 layout_.layers[size_t(w.end() - 1)].down);
      if (opened[size_t(w.first)]) {
        for (int l = w.first; l < w.end(); ++l) close_grads(1 + l);
        close_unit_weights(w);
        opened[size_t(w.first)] = false;
      }
      waiting.erase(waiting.begin() + long(k));
    }
  };
  const auto u_end = units_.rbegin() + long(units_.size() - k0);
  for (auto u = units_.rbegin() + long(units_.size() - k1); u != u_end; ++u) {
    const int last = u->end() - 1;
    if (exit_weight(last) > 0) exit_loss(last, B, T_, dloss * exit_weight(last), result);
    if (u->first >= backward_floor_) {  // below it every layer is frozen
      // ZeRO-3: the unit's weights gathered again (the next one's asked for);
      // ZeRO-2/3: its gradient buckets, handed on once final (release).
      open_unit_weights(*u);
      const auto next = std::next(u);
      if (next != u_end && next->first >= backward_floor_) prefetch_unit_weights(*next);
      for (int l = u->first; l < u->end(); ++l) open_grads(1 + l);
      opened[size_t(u->first)] = true;
      unit_backward_mode(*u, B, T_, run_mode_[size_t(u->first)]);
    }
    waiting.push_back(*u);
    just_run = u->first;
    release(false);
  }
  if (exits) {
    grad_ready(layout_.final_norm, int(layout_.tensors().size()) - 1);
    close_grads(head_bucket());
  }
  if (lo > 0) {
    // A later pipeline chunk: the gradient of its input stream, and of the
    // stream below it where a ladder layer read that, go to the stage below.
    settle(2 * lo, dstream_);
    be_->copy(din, dstream_, N * cfg_.hidden_size);
    if (boundary_streams(lo) == 2) {
      ops::Act<T> below = din + N * cfg_.hidden_size;
      be_->zero(below, N * cfg_.hidden_size);
      settle(2 * lo - 1, below);
    }
    STRATA_CHECK(pending_grad_.empty(), "internal error: a deferred input gradient crosses ",
                 "the pipeline stage boundary at layer ", lo, " to a stream not sent");
    release(true);
    if (head_open && layout_.lm_head < 0) {  // a tied head's gradient, in the embedding
      grad_ready(layout_.embed, layout_.embed);
      close_grads(0);
    }
    return;
  }
  settle_all(dstream_);  // what is still in flight flows into x_0
  release(true);
  open_grads(0);
  if (trainable_[layout_.embed])
    be_->embedding_backward(grad(layout_.embed), tokens, dstream_, N, cfg_.hidden_size,
                            int64_t(tp_rank()) * v_local(), tp_.active() ? v_local() : -1);
  grad_ready(layout_.embed, layout_.embed);
  // Twice when the head is the embedding (opened for the head's gradient too).
  close_grads(0);
  if (head_open && layout_.lm_head < 0) close_grads(0);
}

// The gradient buckets the head's backward writes (ZeRO-2/3): the final norm
// (+ untied head), and the embedding when it is the head; closed by run_backward.
template <typename T>
void Model<T>::open_head_grads() {
  open_grads(head_bucket());
  if (layout_.lm_head < 0) open_grads(0);
}

template <typename T>
LossResult Model<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int T_) {
  run_forward(tokens, B, T_);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  LossResult r;
  have_forward_ = true;
  OpenHead head(*this);
  r.loss_sum =
      head_ce().forward(lnf_, rstdf_, lsef_, nullptr, &r.n_valid,
                        streams_[2 * cfg_.num_hidden_layers], param(layout_.final_norm),
                        head_weight(), targets, N, cfg_.hidden_size, v_local(), cfg_.rms_norm_eps);
  return r;
}

template <typename T>
void Model<T>::backward(double dloss) {
  STRATA_CHECK(have_forward_, "backward() needs a completed forward() first");
  ensure_grads();
  const int64_t N = int64_t(batch_) * seq_;
  be_->zero(dstream_, N * cfg_.hidden_size);
  OpenHead head(*this);
  open_head_grads();
  head_ce().backward(dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}),
                     streams_[2 * cfg_.num_hidden_layers], lnf_, rstdf_, lsef_,
                     param(layout_.final_norm), head_weight(), targets_.data(), N, cfg_.hidden_size,
                     v_local(), dloss);
  run_backward(tokens_.data(), batch_, seq_);
}

template <typename T>
LossResult Model<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T_,
                                      double dloss, const LayerSkipStep* skip) {
  const int L = cfg_.num_hidden_layers;
  if (skip && !skip->exit_weight.empty())
    STRATA_CHECK(int(skip->exit_weight.size()) == L, "layer skip: exit weights for ",
                 skip->exit_weight.size(), " layers, the model has ", L);
  ensure_grads();
  run_forward(tokens, B, T_, -1, skip);
  const int64_t N = int64_t(B) * T_;
  targets_.assign(targets, targets + N);
  be_->zero(dstream_, N * cfg_.hidden_size);
  LossResult r;
  r.exit_loss_sum.assign(size_t(L), std::nan(""));
  OpenHead head(*this);
  open_head_grads();
  const double w_last = skip && !skip->exit_weight.empty() ? skip->exit_weight[size_t(L - 1)] : 1.0;
  r.loss_sum = head_ce().forward_backward(
      dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &r.n_valid,
      streams_[2 * L], param(layout_.final_norm), head_weight(), targets, N, cfg_.hidden_size,
      v_local(), cfg_.rms_norm_eps, dloss * w_last);
  r.exit_loss_sum[size_t(L - 1)] = r.loss_sum;
  run_backward(tokens, B, T_, skip, &r, dloss);
  r.objective = 0;
  for (int l = 0; l < L; ++l) {
    const double w = skip && !skip->exit_weight.empty() ? skip->exit_weight[size_t(l)]
                                                        : (l == L - 1 ? 1.0 : 0.0);
    if (w > 0) r.objective += w * r.exit_loss_sum[size_t(l)];
  }
  return r;
}

template <typename T>
void Model<T>::forward_logits(const int32_t* tokens, int B, int T_, T* logits) {
  run_forward(tokens, B, T_);
  head_rows(streams_[2 * cfg_.num_hidden_layers], int64_t(B) * T_, logits, lnf_);
}

template <typename T>
void Model<T>::forward_hidden(const int32_t* tokens, int B, int T_, int exit_layer) {
  run_forward(tokens, B, T_, exit_layer);
}

template <typename T>
ops::ActIn<T> Model<T>::block_forward(int layer, ops::ActIn<T> x, int B, int T_) {
  STRATA_CHECK(!store_, "block_forward: not under ZeRO-2/3");
  block_unit_ = -1;
  for (size_t k = 0; k < units_.size(); ++k)
    if (units_[k].first == layer) block_unit_ = int(k);
  STRATA_CHECK(block_unit_ >= 0, "block_forward: no unit of plan '", plan_.to_string(),
               "' starts at layer ", layer);
  whole_passes();
  begin_pass(B, T_);
  const PlanUnit& u = units_[size_t(block_unit_)];
  be_->copy(streams_[size_t(2 * u.first)], x, int64_t(B) * T_ * cfg_.hidden_size);
  unit_forward_mode(u, B, T_, RunMode::All);
  materialize(2 * u.end());
  return streams_[size_t(2 * u.end())];
}

template <typename T>
void Model<T>::block_backward(ops::ActIn<T> dout) {
  STRATA_CHECK(block_unit_ >= 0, "block_backward needs a block_forward first");
  const PlanUnit& u = units_[size_t(block_unit_)];
  be_->copy(dstream_, dout, int64_t(batch_) * seq_ * cfg_.hidden_size);
  pending_grad_.clear();
  unit_backward_mode(u, batch_, seq_, RunMode::All);
  settle_all(dstream_);
}

template <typename T>
void Model<T>::head_rows(ops::ActIn<T> x, int64_t n, T* logits, ops::Act<T> xn_scratch) {
  OpenHead head(*this);
  if (!tp_.active()) {
    be_->head_logits(logits, xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                     cfg_.hidden_size, cfg_.vocab_size, cfg_.rms_norm_eps);
    return;
  }
  if (tp_local_.size() < size_t(n) * v_local())
    tp_local_ = ops::DeviceBuffer<T>(be_.get(), size_t(n) * v_local());
  be_->head_logits(tp_local_.data(), xn_scratch, x, param(layout_.final_norm), head_weight(), n,
                   cfg_.hidden_size, v_local(), cfg_.rms_norm_eps);
  gather_vocab(tp_local_.data(), n, logits);
}

// (The other members are instantiated with the class in model.cpp.)
template void Model<float>::exit_loss(int l, int B, int T_, double scale, LossResult* result);
template void Model<float>::embed(const int32_t* tokens, int64_t n, ops::Act<float> x);
template void Model<float>::begin_pass(int B, int T_);
template void Model<float>::run_forward(const int32_t* tokens, int B, int T_, int exit_layer,
                                        const LayerSkipStep* skip);
template void Model<float>::run_backward(const int32_t* tokens, int B, int T_,
                                         const LayerSkipStep* skip, LossResult* result,
                                         double dloss, size_t k0, size_t k1, ops::Act<float> din);
template void Model<float>::forward_units(size_t k0, size_t k1, int B, int T_, int exit_layer,
                                          const LayerSkipStep* skip);
template void Model<float>::open_head_grads();
template LossResult Model<float>::forward(const int32_t* tokens, const int32_t* targets, int B,
                                          int T_);
template void Model<float>::backward(double dloss);
template LossResult Model<float>::forward_backward(const int32_t* tokens, const int32_t* targets,
                                                   int B, int T_, double dloss,
                                                   const LayerSkipStep* skip);
template void Model<float>::forward_logits(const int32_t* tokens, int B, int T_, float* logits);
template void Model<float>::forward_hidden(const int32_t* tokens, int B, int T_, int exit_layer);
template ops::ActIn<float> Model<float>::block_forward(int layer, ops::ActIn<float> x, int B,
                                                       int T_);
template void Model<float>::block_backward(ops::ActIn<float> dout);
template void Model<float>::head_rows(ops::ActIn<float> x, int64_t n, float* logits,
                                      ops::Act<float> xn_scratch);
template void Model<double>::exit_loss(int l, int B, int T_, double scale, LossResult* result);
template void Model<double>::embed(const int32_t* tokens, int64_t n, ops::Act<double> x);
template void Model<double>::begin_pass(int B, int T_);
template void Model<double>::run_forward(const int32_t* tokens, int B, int T_, int exit_layer,
                                         const LayerSkipStep* skip);
template void Model<double>::run_backward(const int32_t* tokens, int B, int T_,
                                          const LayerSkipStep* skip, LossResult* result,
                                          double dloss, size_t k0, size_t k1, ops::Act<double> din);
template void Model<double>::forward_units(size_t k0, size_t k1, int B, int T_, int exit_layer,
                                           const LayerSkipStep* skip);
template void Model<double>::open_head_grads();
template LossResult Model<double>::forward(const int32_t* tokens, const int32_t* targets, int B,
                                           int T_);
template void Model<double>::backward(double dloss);
template LossResult Model<double>::forward_backward(const int32_t* tokens, const int32_t* targets,
                                                    int B, int T_, double dloss,
                                                    const LayerSkipStep* skip);
template void Model<double>::forward_logits(const int32_t* tokens, int B, int T_, double* logits);
template void Model<double>::forward_hidden(const int32_t* tokens, int B, int T_, int exit_layer);
template ops::ActIn<double> Model<double>::block_forward(int layer, ops::ActIn<double> x, int B,
                                                         int T_);
template void Model<double>::block_backward(ops::ActIn<double> dout);
template void Model<double>::head_rows(ops::ActIn<double> x, int64_t n, double* logits,
                                       ops::Act<double> xn_scratch);

}  // namespace strata
