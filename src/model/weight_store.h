// Where the model's weights and gradients live when they are not whole on
// this process: ZeRO-2 and ZeRO-3 over data parallelism (model/zero.h).
//
// The model works on *buckets*, contiguous ranges of its parameter layout:
// bucket 0 is the embedding, bucket 1 + l decoder layer l, the last one the
// final norm with the LM head (when untied). The executor opens a bucket's
// weights before it reads them and closes them after (forward: around each
// plan unit, the next unit's weights asked for ahead; backward: again, until
// the unit's gradients are complete), and opens a bucket's gradients before
// backward writes them and closes them once they are final for the
// micro-batch, so the store can gather weights just in time and
// reduce-scatter each gradient as soon as backward has produced it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/params.h"
#include "ops/backend.h"

namespace strata {

struct WeightBucket {
  int first = 0, last = 0;  // tensors [first, last] of the layout
  int64_t offset = 0;       // the arena range they span (alignment gaps included)
  int64_t numel = 0;
  int layer = -1;  // the decoder layer, -1 for the embedding and the head bucket
};

// The buckets of a layout, in arena order: embedding, layers 0..L-1, final
// norm (+ LM head).
std::vector<WeightBucket> weight_buckets(const ParamLayout& layout);

template <typename T>
class WeightStore;
// Makes the store of a model from the model's own layout, on its backend
// (Model's constructor calls it once both exist).
template <typename T>
using WeightStoreFactory =
    std::function<std::unique_ptr<WeightStore<T>>(const ParamLayout&, ops::Backend<T>&)>;

template <typename T>
class WeightStore {
 public:
  virtual ~WeightStore() = default;
  // True when the store holds the weights (ZeRO-3: the model allocates none
  // and reads a bucket only between open and close); false when the model's
  // own arena holds them whole (ZeRO-2).
  virtual bool holds_weights() const = 0;
  // Bucket b's whole weights, readable until close_weights(b) (backend
  // memory, laid out as the arena range of the bucket). Collective over the
  // data-parallel group: every rank opens the same buckets in the same order.
  virtual T* open_weights(int b) = 0;
  virtual void close_weights(int b) = 0;
  // Sets bucket b's weights from its whole values (backend memory, the
  // bucket's arena range); no communication (every rank passes the same).
  virtual void write_weights(int b, const T* whole) = 0;
  // A hint that bucket b will be opened next: its gather may start now.
  virtual void prefetch_weights(int b) = 0;
  // A zeroed buffer for bucket b's gradients of this micro-batch (the arena
  // range of the bucket), written by backward until close_gradients(b), which
  // hands them on (reduce-scatter into this rank's shard, added to what the
  // step's earlier micro-batches left there).
  virtual T* open_gradients(int b) = 0;
  virtual void close_gradients(int b) = 0;
  // Model::zero_grad: the step's accumulated gradient shards back to zero.
  virtual void zero_gradients() = 0;
  // Lets outstanding collectives advance (called between kernels).
  virtual void progress() = 0;
};

}  // namespace strata
