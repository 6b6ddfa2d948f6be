// Pipeline stages of the executor (model.h, "Pipeline stages"): a model made
// with a StageHolding runs its chunks of units one micro-batch at a time, each
// micro-batch's activations in a slot of their own, and hands the streams at
// its boundaries (and their gradients) to the stages around it.
//
// A boundary below layer l carries x_{2l}, and also x_{2l-1} when layer l's
// unit reads the stream below its input (a ladder layer's attention reads
// x_{2l-1}): the stale input and the deferred residual's sum both cross. In
// backward the gradient of x_{2l} crosses, and the part of x_{2l-1}'s
// gradient that layer l's attention produced (its input norm's backward runs
// on the upper stage, which holds that norm); the lower stage adds it when its
// walk reaches x_{2l-1}, as the whole model adds the deferred input gradient.
#include <cmath>
#include <optional>

#include "core/error.h"
#include "model/model.h"

namespace strata {

template <typename T>
int Model<T>::boundary_streams(int layer) const {
  STRATA_CHECK(layer > 0 && layer < cfg_.num_hidden_layers, "no pipeline boundary below layer ",
               layer);
  for (const PlanUnit& u : units_)
    if (u.first == layer) return kind_info(u.kind).reads_stream_below ? 2 : 1;
  throw Error("layer plan '" + plan_.to_string() + "' has no unit starting at layer " +
              std::to_string(layer) + ": a pipeline boundary falls inside a unit");
}

template <typename T>
std::pair<size_t, size_t> Model<T>::chunk_units(int c) const {
  STRATA_CHECK(c >= 0 && c < int(chunks_.size()), "pipeline chunk ", c, " of ", chunks_.size());
  const auto [lo, hi] = chunks_[size_t(c)];
  size_t k0 = 0, k1 = 0;
  for (size_t k = 0; k < units_.size(); ++k) {
    if (units_[k].first == lo) k0 = k;
    if (units_[k].end() == hi) k1 = k + 1;
  }
  return {k0, k1};
}

template <typename T>
void Model<T>::swap_slot_state(Slot& s) {
  std::swap(acts_, s.acts);
  std::swap(stats_, s.stats);
  std::swap(batch_, s.batch);
  std::swap(seq_, s.seq);
  std::swap(active_lo_, s.lo);
  std::swap(active_hi_, s.hi);
  std::swap(slot_chunk_, s.chunk);
  std::swap(tokens_, s.tokens);
  std::swap(targets_, s.targets);
  std::swap(run_mode_, s.run_mode);
  // Swapped, not copied: the records point at kept_'s elements, which move
  // with the vector's storage.
  std::swap(kept_, s.kept);
  std::swap(records_, s.records);
  std::swap(pass_, s.pass);
  std::swap(have_forward_, s.have_forward);
}

template <typename T>
void Model<T>::use_activation_slot(int k) {
  STRATA_CHECK(k >= 0, "activation slot ", k);
  if (slots_.empty()) slots_.resize(1);
  if (k == slot_) return;
  STRATA_CHECK(pending_out_.empty() && pending_grad_.empty(),
               "internal error: activation slot changed inside a pass");
  if (size_t(k) >= slots_.size()) slots_.resize(size_t(k) + 1);
  swap_slot_state(slots_[size_t(slot_)]);  // the current state into its entry
  swap_slot_state(slots_[size_t(k)]);      // and slot k's out of its own
  slot_ = k;
  // Point every activation at slot k's arenas again (the same carving).
  const int B = batch_, seq = seq_;
  batch_ = seq_ = 0;
  if (B > 0) ensure_activations(B, seq);
}

template <typename T>
void Model<T>::stage_forward(int chunk, const int32_t* tokens, const int32_t* targets, int B,
                             int seq, uint64_t pass, ops::ActIn<T> in, const LayerSkipStep* skip) {
  const auto [lo, hi] = chunks_.at(size_t(chunk));
  if (lo != active_lo_ || hi != active_hi_) {
    active_lo_ = lo, active_hi_ = hi;
    batch_ = seq_ = 0;  // carve this chunk's layers
  }
  restart_passes(pass);
  begin_pass(B, seq);
  block_unit_ = -1;
  slot_chunk_ = chunk;
  const int64_t N = int64_t(B) * seq, C = cfg_.hidden_size;
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  if (lo == 0) {
    embed(tokens, N, streams_[0]);
  } else {
    STRATA_CHECK(bool(in), "stage_forward: the chunk at layer ", lo, " needs its input streams");
    be_->copy(streams_[size_t(2 * lo)], in, N * C);
    if (boundary_streams(lo) == 2) be_->copy(streams_[size_t(2 * lo - 1)], in + N * C, N * C);
  }
  const auto [k0, k1] = chunk_units(chunk);
  forward_units(k0, k1, B, seq, cfg_.num_hidden_layers, skip);
  materialize(2 * hi);
  have_forward_ = true;
}

template <typename T>
void Model<T>::stage_output(ops::Act<T> out) {
  STRATA_CHECK(have_forward_ && slot_chunk_ >= 0, "stage_output needs a stage_forward first");
  const int hi = chunks_[size_t(slot_chunk_)].second;
  STRATA_CHECK(hi < cfg_.num_hidden_layers, "stage_output: the last chunk has no stage above");
  const int64_t n = int64_t(batch_) * seq_ * cfg_.hidden_size;
  be_->copy(out, streams_[size_t(2 * hi)], n);
  if (boundary_streams(hi) == 2) be_->copy(out + n, streams_[size_t(2 * hi - 1)], n);
}

template <typename T>
LossResult Model<T>::stage_loss() {
  STRATA_CHECK(have_forward_ && slot_chunk_ >= 0, "stage_loss needs a stage_forward first");
  const int L = cfg_.num_hidden_layers;
  STRATA_CHECK(chunks_[size_t(slot_chunk_)].second == L, "stage_loss: not the last chunk");
  const int64_t N = int64_t(batch_) * seq_;
  LossResult r;
  OpenHead head(*this);
  r.loss_sum = head_ce().forward(lnf_, rstdf_, lsef_, nullptr, &r.n_valid, streams_[size_t(2 * L)],
                                 param(layout_.final_norm), head_weight(), targets_.data(), N,
                                 cfg_.hidden_size, v_local(), cfg_.rms_norm_eps);
  return r;
}

template <typename T>
void Model<T>::stage_last_logits(T* logits) {
  STRATA_CHECK(have_forward_ && slot_chunk_ >= 0, "stage_last_logits needs a stage_forward first");
  const int L = cfg_.num_hidden_layers;
  STRATA_CHECK(chunks_[size_t(slot_chunk_)].second == L, "stage_last_logits: not the last chunk");
  STRATA_CHECK(batch_ == 1, "stage_last_logits: one sequence, not ", batch_);
  OpenHead head(*this);
  head_rows(streams_[size_t(2 * L)] + int64_t(seq_ - 1) * cfg_.hidden_size, 1, logits, lnf_);
}

template <typename T>
LossResult Model<T>::stage_backward(double dloss, ops::ActIn<T> dout, ops::Act<T> din,
                                    const LayerSkipStep* skip) {
  STRATA_CHECK(have_forward_ && slot_chunk_ >= 0,
               "stage_backward needs this slot's stage_forward first");
  ensure_grads();
  const int L = cfg_.num_hidden_layers;
  const auto [lo, hi] = chunks_[size_t(slot_chunk_)];
  const int B = batch_, seq = seq_;
  const int64_t N = int64_t(B) * seq, C = cfg_.hidden_size;
  const bool weighted = skip && !skip->exit_weight.empty();
  if (weighted)
    STRATA_CHECK(int(skip->exit_weight.size()) == L, "layer skip: exit weights for ",
                 skip->exit_weight.size(), " layers, the model has ", L);
  auto weight = [&](int l) {
    return weighted ? skip->exit_weight[size_t(l)] : (l == L - 1 ? 1.0 : 0.0);
  };
  bool exits = false;
  for (int l = lo; l < hi && l + 1 < L; ++l) exits |= weight(l) > 0;
  LossResult r;
  r.exit_loss_sum.assign(size_t(L), std::nan(""));
  std::optional<OpenHead> head;
  if (hi == L || exits) {
    STRATA_CHECK(layout_.stage().head, "layer ", hi == L ? L - 1 : lo,
                 " has a loss but this pipeline stage does not hold the head");
    head.emplace(*this);
    open_head_grads();
  }
  if (hi == L) {
    be_->zero(dstream_, N * C);
    r.loss_sum = head_ce().forward_backward(
        dstream_, grad_if({layout_.final_norm}), grad_if({head_index()}), lnf_, rstdf_, &r.n_valid,
        streams_[size_t(2 * L)], param(layout_.final_norm), head_weight(), targets_.data(), N, C,
        v_local(), cfg_.rms_norm_eps, dloss * weight(L - 1));
    r.exit_loss_sum[size_t(L - 1)] = r.loss_sum;
  } else {
    STRATA_CHECK(bool(dout), "stage_backward: the chunk below layer ", hi,
                 " needs the gradient of its output streams");
    be_->copy(dstream_, dout, N * C);
    if (boundary_streams(hi) == 2) be_->copy(d_boundary_, dout + N * C, N * C);
  }
  if (lo > 0) STRATA_CHECK(bool(din), "stage_backward: no buffer for the input streams' gradient");
  const auto [k0, k1] = chunk_units(slot_chunk_);
  run_backward(tokens_.data(), B, seq, skip, &r, dloss, k0, k1, din);
  r.objective = 0;
  for (int l = lo; l < hi; ++l)
    if (weight(l) > 0) r.objective += weight(l) * r.exit_loss_sum[size_t(l)];
  slot_chunk_ = -1;  // its backward is done
  return r;
}

#define STRATA_STAGE_MEMBERS(T)                                                                  \
  template int Model<T>::boundary_streams(int) const;                                            \
  template std::pair<size_t, size_t> Model<T>::chunk_units(int) const;                           \
  template void Model<T>::swap_slot_state(Slot&);                                                \
  template void Model<T>::use_activation_slot(int);                                              \
  template void Model<T>::stage_forward(int, const int32_t*, const int32_t*, int, int, uint64_t, \
                                        ops::ActIn<T>, const LayerSkipStep*);                    \
  template void Model<T>::stage_output(ops::Act<T>);                                             \
  template LossResult Model<T>::stage_loss();                                                    \
  template void Model<T>::stage_last_logits(T*);                                                 \
  template LossResult Model<T>::stage_backward(double, ops::ActIn<T>, ops::Act<T>,               \
                                               const LayerSkipStep*);
STRATA_STAGE_MEMBERS(float)
STRATA_STAGE_MEMBERS(double)
#undef STRATA_STAGE_MEMBERS

}  // namespace strata
