// AdamW over the model's parameter arena, with global-norm gradient clipping.
// Only trainable tensors have optimizer state: their moments are packed into
// two arenas of their own (frozen tensors cost no memory and no update work).
// Weight decay applies to matrices (embedding, projections, head), not to norm
// weights or biases.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/params.h"
#include "model/zero.h"
#include "ops/backend.h"
#include "parallel/comm.h"

namespace strata {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables clipping
};

template <typename T>
class AdamW {
 public:
  // What one rank updates: element `param_offset` of the weights, with its
  // gradient at `grad_offset` and its moments at `moment_offset` (-1: this
  // rank only counts its gradient in the norm), `numel` of them, of `tensor`.
  struct Piece {
    int tensor = 0;
    int64_t param_offset = 0, grad_offset = 0, moment_offset = -1, numel = 0;
  };

  // `trainable` has one entry per layout tensor (empty: all trainable).
  // `owned` (ZeRO-1: empty means all) restricts the optimizer state and the
  // update to the tensors this data-parallel rank owns; the gradient norm
  // still covers every trainable tensor.
  AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg,
        std::vector<bool> trainable = {}, std::vector<bool> owned = {});
  // ZeRO-2/3: this rank updates `pieces` (slices of the trainable tensors in
  // its shard arenas; moments in arenas of `moment_elements`, a piece's at
  // its gradient's offset), and the gradient norm sums the pieces' squares
  // over the data-parallel group `dp`.
  AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg,
        std::vector<Piece> pieces, int64_t moment_elements, Communicator* dp);

  // Under tensor parallelism the global gradient norm adds the squares of the
  // split tensors over the tp group (replicated tensors count once).
  void set_tp_comm(Communicator* tp) { tp_ = tp; }
  // Under pipeline parallelism the norm adds every stage's squares over the
  // pp group; `counted[t]` false leaves out this rank's copy of a tensor that
  // several stages hold (summed by sum_shared_gradients: it counts once, on
  // one of them).
  void set_pp_comm(Communicator* pp, std::vector<bool> counted) {
    pp_ = pp;
    counted_ = std::move(counted);
  }

  // Updates the owned trainable parameters with learning rate `lr` from the
  // trainable gradients clipped to the global norm (if configured; the
  // factor is applied as the update reads them, the gradient buffers are left
  // as they are). Without data or tensor parallelism the factor is computed
  // where the update runs, so the host does not wait between the norm and the
  // update (one read of the norm once all is queued). Returns
  // the gradient norm before clipping. A non-finite norm (NaN or inf in a
  // gradient) updates nothing: weights, moments and the step count stay as
  // they were, and the caller decides (training stops). `params` and `grads`
  // are the bases the pieces' offsets count from (the arenas; under ZeRO-2
  // the weight arena and the gradient shard, under ZeRO-3 the shards).
  double step(T* params, T* grads, double lr);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // Per tensor (not under ZeRO-2/3): whether this rank holds its moments, and
  // where (backend memory).
  bool has_state(int tensor) const { return offset_[tensor] >= 0; }
  T* exp_avg(int tensor) { return m_.data() + offset_[tensor]; }
  T* exp_avg_sq(int tensor) { return v_.data() + offset_[tensor]; }
  // The moment arenas themselves (under ZeRO-2/3: shaped as the shard arenas).
  T* exp_avg_arena() { return m_.data(); }
  T* exp_avg_sq_arena() { return v_.data(); }
  int64_t state_elements() const { return int64_t(m_.size()); }
  const AdamWConfig& config() const { return cfg_; }

 private:
  ops::Backend<T>& be_;
  const ParamLayout& layout_;
  AdamWConfig cfg_;
  std::vector<Piece> pieces_;    // the norm covers all, the update those with moments
  std::vector<int64_t> offset_;  // per tensor: offset into m_/v_, -1 without state (ZeRO 0/1)
  Communicator* tp_ = nullptr;
  Communicator* pp_ = nullptr;
  std::vector<bool> counted_;
  Communicator* dp_ = nullptr;  // ZeRO-2/3: the norm's squares summed over it
  ops::DeviceBuffer<T> m_, v_;
  // Two scalar accumulators in backend memory (squares of the split and of
  // the replicated gradients), read once per step.
  std::unique_ptr<double, std::function<void(double*)>> squares_;
  int64_t step_ = 0;
};

// ZeRO-2/3: the optimizer of this rank's shards in `store` (its pieces of
// the tensors `trainable` marks; moments shaped as the shard arenas; the
// clipping norm summed over the store's data-parallel group). Its step takes
// the weights' base (the model's arena at stage 2, store.weight_shard() at
// stage 3) and store.gradient_shard().
std::unique_ptr<AdamW<float>> make_sharded_adamw(ops::Backend<float>& be, const ParamLayout& layout,
                                                 const AdamWConfig& cfg, ZeroShards& store,
                                                 const std::vector<bool>& trainable);
// The step of such an optimizer: every reduce-scatter waited for, AdamW on
// the shards, then the store's weights made current (stage 2: the updated
// slices all-gathered into `arena`, the model's weights; stage 3: the kept
// embedding and head dropped). Returns the gradient norm (AdamW::step).
double sharded_step(AdamW<float>& opt, ZeroShards& store, float* arena, double lr);

}  // namespace strata
