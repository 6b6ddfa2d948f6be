// ZeRO-2/3 weight store (zero.h) and the model's buckets (weight_store.h).
#include "model/zero.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace strata {

std::vector<WeightBucket> weight_buckets(const ParamLayout& layout) {
  std::vector<WeightBucket> out;
  auto add = [&](int first, int last, int layer) {
    WeightBucket b;
    b.first = first, b.last = last, b.layer = layer;
    b.offset = layout[first].offset;
    b.numel = layout[last].offset + layout[last].numel - b.offset;
    out.push_back(b);
  };
  add(layout.embed, layout.embed, -1);
  for (size_t l = 0; l < layout.layers.size(); ++l)
    add(layout.layers[l].input_norm, layout.layers[l].down, int(l));
  add(layout.final_norm, int(layout.tensors().size()) - 1, -1);
  // The buckets tile the tensors in order (the executor relies on it).
  int next = 0;
  for (const WeightBucket& b : out) {
    STRATA_CHECK(b.first == next && b.last >= b.first,
                 "internal error: the parameter layout's tensors are not in bucket order");
    next = b.last + 1;
  }
  STRATA_CHECK(next == int(layout.tensors().size()),
               "internal error: the buckets leave tensors out of the layout");
  return out;
}

WeightStoreFactory<float> zero_store_factory(Communicator& dp, int stage, ZeroShards** made) {
  return [&dp, stage, made](const ParamLayout& layout, ops::Backend<float>& be) {
    auto z = std::make_unique<ZeroShards>(be, layout, dp, stage);
    if (made) *made = z.get();
    return std::unique_ptr<WeightStore<float>>(std::move(z));
  };
}

ZeroShards::ZeroShards(ops::Backend<float>& be, const ParamLayout& layout, Communicator& dp,
                       int stage)
    : be_(be), dp_(dp), stage_(stage), buckets_(weight_buckets(layout)) {
  STRATA_CHECK(stage == 2 || stage == 3, "ZeRO stage ", stage, ": the weight store runs 2 or 3");
  for (const ParamInfo& t : layout.tensors()) {
    tensor_offset_.push_back(t.offset);
    tensor_numel_.push_back(t.numel);
  }
  const int64_t P = dp.size();
  for (const WeightBucket& b : buckets_) {
    const int64_t per = (b.numel + P - 1) / P;
    shard_.push_back((per + 15) / 16 * 16);
    shard_offset_.push_back(shard_elements_);
    shard_elements_ += shard_.back();
  }
  grad_shard_ = ops::DeviceBuffer<float>(&be_, size_t(shard_elements_));
  if (stage_ == 3) weight_shard_ = ops::DeviceBuffer<float>(&be_, size_t(shard_elements_));
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].layer >= 0) layer_cap_ = std::max(layer_cap_, padded(int(b)));
  const size_t n = buckets_.size();
  gathered_.assign(n, nullptr);
  gather_handle_.assign(n, -1);
  weights_open_.assign(n, false);
  grad_buf_.assign(n, nullptr);
  scatter_handle_.assign(n, -1);
  gathers_.assign(n, 0);
  scatters_.assign(n, 0);
}

ZeroShards::~ZeroShards() {
  // Nothing may still write into buffers freed here; errors are ignored (a
  // run that failed is ending).
  try {
    finish_gradients();
    for (size_t b = 0; b < buckets_.size(); ++b) wait_gather(int(b));
  } catch (...) {
  }
}

int64_t ZeroShards::shard_count(int b) const {
  const int64_t s = shard_[size_t(b)];
  return std::clamp<int64_t>(buckets_[size_t(b)].numel - int64_t(dp_.rank()) * s, 0, s);
}

std::vector<ZeroShards::Piece> ZeroShards::pieces(const std::vector<bool>& include) const {
  std::vector<Piece> out;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const WeightBucket& k = buckets_[b];
    const int64_t lo = k.offset + int64_t(dp_.rank()) * shard_[b];
    const int64_t hi = lo + shard_count(int(b));
    for (int t = k.first; t <= k.last; ++t) {
      if (!include[size_t(t)]) continue;
      const int64_t a = std::max(lo, tensor_offset_[size_t(t)]);
      const int64_t e = std::min(hi, tensor_offset_[size_t(t)] + tensor_numel_[size_t(t)]);
      if (a >= e) continue;
      out.push_back(Piece{t, a, shard_offset_[b] + (a - lo), e - a});
    }
  }
  return out;
}

float* ZeroShards::take(int64_t n) {
  // Two sizes in practice: a layer's (every request up to the largest layer
  // bucket gets that, so layer buffers are interchangeable) and the
  // embedding's or head's; a layer request takes only a layer buffer.
  n = std::max<int64_t>(n <= layer_cap_ ? layer_cap_ : n, 1);
  auto fits = [&](int64_t capacity) { return n == layer_cap_ ? capacity == n : capacity >= n; };
  auto free_buffer = [&]() -> Buffer* {
    Buffer* best = nullptr;
    for (auto& buf : pool_)
      if (!buf->busy && fits(int64_t(buf->mem.size())) &&
          (!best || buf->mem.size() < best->mem.size()))
        best = buf.get();
    return best;
  };
  Buffer* best = free_buffer();
  // None free: the oldest reduce-scatter in flight whose buffer fits is
  // waited for rather than memory grown, unless it is the newest (just
  // started: it has had no compute to hide behind).
  for (size_t i = 0; !best && i + 1 < scatter_order_.size(); ++i) {
    const int b = scatter_order_[i];
    if (fits(std::max(padded(b), layer_cap_))) {
      wait_scatter(b);
      best = free_buffer();
    }
  }
  if (!best) {
    pool_.push_back(std::make_unique<Buffer>());
    best = pool_.back().get();
    best->mem = ops::DeviceBuffer<float>(&be_, size_t(n));
    pool_bytes_ += n * int64_t(sizeof(float));
    peak_bytes_ = std::max(peak_bytes_, pool_bytes_);
  }
  best->busy = true;
  return best->mem.data();
}

void ZeroShards::give(float* p) {
  for (auto& buf : pool_)
    if (buf->mem.data() == p) {
      STRATA_CHECK(buf->busy, "internal error: a ZeRO buffer given back twice");
      buf->busy = false;
      return;
    }
  fail("internal error: a buffer the ZeRO pool does not own was given back");
}

// ------------------------------------------------------------------ weights

bool ZeroShards::timed_wait(int64_t& handle, double& seconds) {
  if (handle < 0) return false;
  Timer t;
  dp_.wait(handle);
  seconds += t.seconds();
  handle = -1;
  return true;
}

void ZeroShards::wait_gather(int b) { timed_wait(gather_handle_[size_t(b)], gather_wait_s_); }

void ZeroShards::drop_gathered(int b) {
  if (!gathered_[size_t(b)]) return;
  wait_gather(b);
  give(gathered_[size_t(b)]);
  gathered_[size_t(b)] = nullptr;
}

void ZeroShards::start_gather(int b) {
  STRATA_CHECK(stage_ == 3, "internal error: ZeRO-2 gathers no weights");
  if (gathered_[size_t(b)]) return;  // gathered, or on its way
  float* buf = take(padded(b));
  gathered_[size_t(b)] = buf;
  gather_handle_[size_t(b)] =
      dp_.allgather_async(weight_shard_.data() + shard_offset_[size_t(b)], buf, shard_[size_t(b)]);
  ++gathers_[size_t(b)];
  gathered_bytes_ += padded(b) * int64_t(sizeof(float));
}

void ZeroShards::prefetch_weights(int b) {
  if (prefetch_) start_gather(b);
}

float* ZeroShards::open_weights(int b) {
  start_gather(b);
  wait_gather(b);
  weights_open_[size_t(b)] = true;
  return gathered_[size_t(b)];
}

void ZeroShards::close_weights(int b) {
  weights_open_[size_t(b)] = false;
  if (buckets_[size_t(b)].layer >= 0) drop_gathered(b);  // embedding and head: kept for the step
}

void ZeroShards::write_weights(int b, const float* whole) {
  STRATA_CHECK(stage_ == 3, "internal error: under ZeRO-2 the model holds its weights");
  STRATA_CHECK(!weights_open_[size_t(b)], "internal error: weights written while open");
  drop_gathered(b);  // a kept embedding or head is stale now
  slice_bucket(b, whole, weight_shard_.data() + shard_offset_[size_t(b)]);
}

void ZeroShards::publish_weights(float* arena) {
  if (stage_ == 3) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      STRATA_CHECK(!weights_open_[b], "internal error: weights updated while open");
      drop_gathered(int(b));
    }
    return;
  }
  // Stage 2: each bucket this step trained, this rank's slice put in its
  // slot of a buffer and all-gathered in place, then copied back whole.
  const int64_t r = dp_.rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (scatters_[b] == 0) continue;  // never trained: unchanged everywhere
    const WeightBucket& k = buckets_[b];
    const int64_t s = shard_[b], c = shard_count(int(b));
    float* buf = take(padded(int(b)));
    float* own = buf + r * s;
    if (c > 0) be_.copy(own, arena + k.offset + r * s, c);
    if (s > c) be_.zero(own + c, s - c);
    dp_.allgather(own, buf, s);
    gathered_bytes_ += padded(int(b)) * int64_t(sizeof(float));
    be_.copy(arena + k.offset, buf, k.numel);
    give(buf);
  }
}

// ---------------------------------------------------------------- gradients

void ZeroShards::wait_scatter(int b) {
  if (!timed_wait(scatter_handle_[size_t(b)], scatter_wait_s_)) return;
  give(grad_buf_[size_t(b)]);
  grad_buf_[size_t(b)] = nullptr;
  scatter_order_.erase(std::find(scatter_order_.begin(), scatter_order_.end(), b));
}

float* ZeroShards::open_gradients(int b) {
  wait_scatter(b);  // the previous micro-batch's, which this one adds to
  STRATA_CHECK(!grad_buf_[size_t(b)], "internal error: gradients of bucket ", b, " opened twice");
  float* buf = take(padded(b));
  be_.zero(buf, padded(b));
  grad_buf_[size_t(b)] = buf;
  return buf;
}

void ZeroShards::close_gradients(int b) {
  float* buf = grad_buf_[size_t(b)];
  STRATA_CHECK(buf && scatter_handle_[size_t(b)] < 0, "internal error: gradients of bucket ", b,
               " closed without being opened");
  const int64_t s = shard_[size_t(b)];
  float* shard = grad_shard_.data() + shard_offset_[size_t(b)];
  // What earlier micro-batches left in this rank's shard joins the sum once:
  // through this rank's own slot.
  float* own = buf + int64_t(dp_.rank()) * s;
  be_.residual_forward(own, own, shard, s);
  scatter_handle_[size_t(b)] = dp_.reduce_scatter_sum_async(buf, shard, s);
  scatter_order_.push_back(b);
  ++scatters_[size_t(b)];
  scattered_bytes_ += padded(b) * int64_t(sizeof(float));
  // Two in flight at most: the oldest has had a unit's compute to finish.
  while (scatter_order_.size() > 2) wait_scatter(scatter_order_.front());
}

void ZeroShards::finish_gradients() {
  while (!scatter_order_.empty()) wait_scatter(scatter_order_.front());
}

void ZeroShards::zero_gradients() {
  finish_gradients();
  be_.zero(grad_shard_.data(), shard_elements_);
}

// -------------------------------------------------------------- checkpoints

void ZeroShards::gather_bucket(int b, const float* shard, float* whole) {
  float* buf = take(padded(b));
  dp_.allgather(shard, buf, shard_[size_t(b)]);
  be_.copy(whole, buf, buckets_[size_t(b)].numel);
  give(buf);
}

void ZeroShards::slice_bucket(int b, const float* whole, float* shard) {
  const int64_t s = shard_[size_t(b)], c = shard_count(b);
  if (c > 0) be_.copy(shard, whole + int64_t(dp_.rank()) * s, c);
  if (s > c) be_.zero(shard + c, s - c);
}

}  // namespace strata
