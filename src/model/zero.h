// ZeRO-2 and ZeRO-3 over a data-parallel group: the weight store
// (weight_store.h) that keeps only this rank's shard of the gradients, the
// AdamW moments and (stage 3) the fp32 weights.
//
// Every bucket of n elements is cut into dp shards of s = ceil(n / dp)
// elements rounded up to 16 (64 bytes); rank r owns elements [r s, r s + s)
// of the bucket (the tail past n is padding, always zero). A rank's shards of
// all buckets, one after the other, form its shard arenas (gradients,
// moments, stage-3 weights), shard_elements() long.
//
//   stage 2: the model's fp32 weights stay whole on every rank (they are at
//     once the compute weights and the master weights: bf16 matmuls convert
//     them as they read). Backward writes each bucket's gradient into a
//     buffer that is reduce-scattered (async) as soon as the bucket is final,
//     into this rank's gradient shard; AdamW updates this rank's slices of
//     the weights, and publish_weights() all-gathers the updated slices.
//   stage 3: the weights are sharded too. A bucket is all-gathered (async)
//     into a buffer when the executor opens it, the next unit's gather
//     running while this unit computes, and freed when it is closed: each
//     layer is gathered twice per micro-batch (forward, backward). The
//     embedding and head buckets stay gathered from their first opening to
//     the next optimizer step (the head serves every early exit).
//
// Buffers come from a pool that keeps freed ones for reuse; peak_buffer_bytes()
// is its high-water mark. A layer's buffers are all of one size (the largest
// layer bucket); when none is free the oldest reduce-scatter in flight is
// waited for and its buffer reused before the pool grows, and at most two
// are in flight. With the standard plan the pool holds at its peak
//   stage 2: one embedding/head-sized buffer + 2 layer buffers (a unit's
//            gradients open, the previous unit's on their way);
//   stage 3: the kept embedding and head, one for their gradients, and 4
//            layer buffers (this unit's weights and the next one's, and the
//            2 of stage 2);
// memory.h's estimate counts the same (more for kinds that keep a unit open
// longer, and for units of several layers).
// Collective over the data-parallel group: every rank calls the same methods
// in the same order. Thread: the caller's (the communicator's rules).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "model/params.h"
#include "model/weight_store.h"
#include "ops/backend.h"
#include "parallel/comm.h"

namespace strata {

class ZeroShards final : public WeightStore<float> {
 public:
  // `layout`: this rank's (tensor-parallel) layout; every rank of `dp` has
  // the same. `stage`: 2 or 3.
  ZeroShards(ops::Backend<float>& be, const ParamLayout& layout, Communicator& dp, int stage);
  ~ZeroShards() override;
  ZeroShards(const ZeroShards&) = delete;
  ZeroShards& operator=(const ZeroShards&) = delete;

  int stage() const { return stage_; }
  ops::Backend<float>& backend() { return be_; }
  Communicator& dp() { return dp_; }
  const std::vector<WeightBucket>& buckets() const { return buckets_; }
  int64_t shard_size(int b) const { return shard_[size_t(b)]; }
  int64_t shard_offset(int b) const { return shard_offset_[size_t(b)]; }
  // This rank's elements of bucket b that lie inside it (<= shard_size).
  int64_t shard_count(int b) const;
  int64_t shard_elements() const { return shard_elements_; }

  // This rank's slices of tensors: element `arena_offset` of the layout's
  // arena is element `shard_offset` of the shard arenas, `numel` of them.
  struct Piece {
    int tensor = 0;
    int64_t arena_offset = 0, shard_offset = 0, numel = 0;
  };
  // The slices of the tensors where `include` is true (AdamW: the trainable).
  std::vector<Piece> pieces(const std::vector<bool>& include) const;

  float* gradient_shard() { return grad_shard_.data(); }
  float* weight_shard() { return weight_shard_.data(); }  // stage 3 (nullptr at stage 2)

  // After the last micro-batch's backward: every reduce-scatter done, so the
  // gradient shard holds the step's summed gradient.
  void finish_gradients();
  // After the optimizer updated this rank's slices. Stage 2: every bucket of
  // `arena` (the model's whole weights) gets the other ranks' updated
  // slices. Stage 3: the gathered embedding and head are dropped.
  void publish_weights(float* arena);

  // Checkpoints. gather_bucket: every rank's shard of bucket b (this rank's
  // is `shard`, backend memory of shard_size(b)) into whole[numel] (backend
  // memory) on every rank. slice_bucket: this rank's shard of bucket b from
  // its whole values (no communication).
  void gather_bucket(int b, const float* shard, float* whole);
  void slice_bucket(int b, const float* whole, float* shard);

  // WeightStore.
  bool holds_weights() const override { return stage_ == 3; }
  float* open_weights(int b) override;
  void close_weights(int b) override;
  void prefetch_weights(int b) override;
  void write_weights(int b, const float* whole) override;
  float* open_gradients(int b) override;
  void close_gradients(int b) override;
  void zero_gradients() override;
  void progress() override { dp_.progress(); }

  // Peak bytes of the pool's buffers (weights gathered, gradients on their
  // way to the shards, publishing), allocated as needed and kept.
  int64_t peak_buffer_bytes() const { return peak_bytes_; }
  // Collectives issued (tests and progress reports): per bucket, gathers
  // of its weights and reduce-scatters of its gradients since the start.
  int64_t gathers(int b) const { return gathers_[size_t(b)]; }
  int64_t scatters(int b) const { return scatters_[size_t(b)]; }
  // Bytes this rank received by all-gathers of weights (stage 3's per unit,
  // stage 2's after the step) and sent into reduce-scatters of gradients,
  // and the seconds spent waiting for stage 3's gathers and for the
  // reduce-scatters to complete (what compute did not hide), since the start.
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t scattered_bytes() const { return scattered_bytes_; }
  double gather_wait_seconds() const { return gather_wait_s_; }
  double scatter_wait_seconds() const { return scatter_wait_s_; }
  // Off: prefetch_weights() does nothing, so every gather starts when its
  // bucket is opened and is waited for at once (to measure the overlap).
  void set_prefetch(bool on) { prefetch_ = on; }

 private:
  struct Buffer {
    ops::DeviceBuffer<float> mem;
    bool busy = false;
  };
  float* take(int64_t n);  // a free buffer of at least n elements
  void give(float* p);
  int64_t padded(int b) const { return shard_[size_t(b)] * dp_.size(); }
  // Waits for `handle` (-1: nothing to wait for), adding the time to
  // `seconds`; whether there was one.
  bool timed_wait(int64_t& handle, double& seconds);
  void wait_gather(int b);
  void wait_scatter(int b);
  void drop_gathered(int b);  // a gathered bucket's buffer back to the pool

  ops::Backend<float>& be_;
  Communicator& dp_;
  int stage_;
  std::vector<WeightBucket> buckets_;
  std::vector<int64_t> tensor_offset_, tensor_numel_;  // the layout's, per tensor
  std::vector<int64_t> shard_, shard_offset_;
  int64_t shard_elements_ = 0;
  ops::DeviceBuffer<float> grad_shard_, weight_shard_;
  std::vector<std::unique_ptr<Buffer>> pool_;
  int64_t pool_bytes_ = 0, peak_bytes_ = 0;
  int64_t layer_cap_ = 0;  // the largest layer bucket, padded: the size of a layer buffer
  // Per bucket: the gathered weights (stage 3) and their pending gather
  // (-1: none), whether they are open; the gradient buffer and its pending
  // reduce-scatter.
  std::vector<float*> gathered_;
  std::vector<int64_t> gather_handle_;
  std::vector<bool> weights_open_;
  std::vector<float*> grad_buf_;
  std::vector<int64_t> scatter_handle_;
  std::deque<int> scatter_order_;  // buckets with a reduce-scatter in flight, oldest first
  std::vector<int64_t> gathers_, scatters_;
  int64_t gathered_bytes_ = 0, scattered_bytes_ = 0;
  double gather_wait_s_ = 0, scatter_wait_s_ = 0;
  bool prefetch_ = true;
  void start_gather(int b);
};

// The factory of a model's ZeRO store (Model's constructor), which also
// hands back the store it made (owned by the model).
WeightStoreFactory<float> zero_store_factory(Communicator& dp, int stage, ZeroShards** made);

}  // namespace strata
