// The generation engine: incremental forward passes over a preallocated KV
// cache of `batch` sequences, layer range by layer range, which is what plain
// decoding, early exit (layers [0, E) only), self-speculative decoding (draft
// with [0, E), verify with [E, L)) and batched decoding are built from.
//
// It runs the model's own layer path: each plan unit's kind (model/kinds/)
// over the modules of model/modules.h, with the KV-cache attention as the
// attention core; under tensor parallelism (a model built with a tp group)
// each rank holds its heads' cache and the kinds' reductions run over the
// group, so every rank computes the same tokens. Layer ranges must start and
// end at unit boundaries of the plan.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "model/model.h"
#include "ops/backend.h"

namespace strata {

class KvEngine {
 public:
  // A cache of `max_len` positions (at most the model's context) for layers
  // [0, layers) (default: all), stored in fp32 or bf16 (`cache`: half the
  // memory and the bytes attention reads; keys and values rounded to bf16).
  KvEngine(Model<float>& model, int max_len, int layers = -1, int batch = 1,
           ops::Dtype cache = ops::Dtype::F32);

  int max_len() const { return max_len_; }
  int layers() const { return layers_; }
  int batch() const { return batch_; }
  // This rank's key/value heads of layer l in the cache, and the cache's bytes.
  int kv_heads(int l) const { return int(kv_heads_[size_t(l) + 1] - kv_heads_[size_t(l)]); }
  int64_t cache_bytes() const {
    return int64_t(k_.size() + v_.size()) * int64_t(ops::dtype_size(k_.dtype()));
  }
  ops::Dtype cache_dtype() const { return k_.dtype(); }
  // Positions of sequence `seq` cached in layer l.
  int length(int l, int seq = 0) const { return len_[size_t(seq * layers_ + l)]; }
  // Drops positions >= len from layers [l0, l1) of a sequence (rejected drafts).
  void crop(int l0, int l1, int len, int seq = 0);
  void reset();

  // x[n, C] = embeddings of tokens[n] (x: backend memory, host on the CPU;
  // tokens: host).
  void embed(const int32_t* tokens, int n, float* x);
  // Runs x[n, C] (the residual stream of n consecutive new positions) through
  // layers [l0, l1), appending their keys and values; all those layers must
  // hold the same number of positions. In place. `mid` (optional, n x C):
  // the stream inside layer l0 - 1 (x_{2 l0 - 1}) on entry, which a ladder
  // layer at l0 reads, and the stream inside layer l1 - 1 on return, so a
  // pass over [0, E) can hand a later pass over [E, L) what it needs
  // (self-speculative verification).
  void run_layers(float* x, int n, int l0, int l1, int seq = 0, float* mid = nullptr);
  // One new position for each of the sequences seqs[r] (r < rows): x[rows, C]
  // through layers [l0, l1) in one batched pass (GEMMs over all rows; each
  // row attends over its own cache).
  void decode_rows(float* x, const std::vector<int>& seqs, int l0, int l1);
  // logits[n, V] = head(final_norm(x[n, C])).
  void logits(const float* x, int n, float* out);

  // Graphs for decode_rows: on a backend that records them (ops::Backend::
  // graphs(): cuda, simt) and without tensor parallelism, a decode step of a
  // given shape (rows, layer range, stream buffer) runs eagerly once, is
  // captured the next time, and is then replayed as one graph, the rows'
  // positions and cache slots read from backend memory. The same numbers as
  // eager decoding, bit for bit. On by default; off runs every step eagerly.
  void set_graphs(bool on) { graphs_on_ = on; }
  bool graphs_enabled() const;
  // Decode steps replayed from a graph, and graphs captured, so far.
  int64_t graph_replays() const { return replays_; }
  int64_t graph_captures() const { return captures_; }

 private:
  class Pass;  // UnitForward over the KV cache (engine.cpp)
  void ensure_scratch(int n);
  // decode_rows' steps, eager or replayed.
  void decode_step(float* x, int rows, int l0, int l1, const std::vector<int>& seqs,
                   const std::vector<int>& pos);
  // Sequence s's cache block of layer l starts at k_cache(l, 0) + s *
  // seq_stride() (v alike).
  int64_t seq_stride() const { return int64_t(kv_heads_[size_t(layers_)]) * max_len_ * D_; }
  ops::Act<float> k_cache(int l, int seq) { return k_.data() + int64_t(cache_offset(l, seq)); }
  ops::Act<float> v_cache(int l, int seq) { return v_.data() + int64_t(cache_offset(l, seq)); }
  // Sequence seq's block, then layer l's heads in it (a rank holding none of
  // a layer, under Layer Parallelism's tp mapping, has no cache for it).
  size_t cache_offset(int l, int seq) const {
    return (size_t(seq) * kv_heads_[size_t(layers_)] + kv_heads_[size_t(l)]) * max_len_ * D_;
  }
  // Runs the units of layers [l0, l1) over rows r < rows of x, row r being
  // position pos[r] of sequence seqs[r].
  void run_units(float* x, int rows, int l0, int l1, const std::vector<int>& seqs,
                 const std::vector<int>& pos, float* mid = nullptr);
  void check_range(int l0, int l1) const;
  Model<float>& m_;
  ops::Backend<float>& be_;
  int C_ = 0, D_ = 0;  // hidden size, head dim
  // Prefix sums of this rank's KV heads over layers [0, layers]; the largest
  // layer's sizes (scratch).
  std::vector<size_t> kv_heads_;
  int64_t max_qkv_ = 0, max_q_ = 0, max_f_ = 0;
  int max_len_, layers_, batch_;
  std::vector<int> len_;
  ops::ActBuffer<float> k_, v_;  // [batch, layers, this rank's Hkv of the layer, max_len, D]
  int scratch_rows_ = 0;
  ops::DeviceBuffer<float> ln_, rstd_, qkv_, att_, attn_out_, mlp_out_, gateup_, h_, xn_, odd_;
  ops::DeviceBuffer<float> mixed_norm_;  // a Layer-Parallel pair's MLP norm weights
  ops::DeviceBuffer<float> sum_out_;     // a par group's running sum
  ops::DeviceBuffer<float> spd_h_, spd_ln_, spd_rstd_, spd_p_;  // an SPD block's virtual rank
  // decode_rows' rows: positions [0, rows) then cache slots [rows, 2 rows),
  // in backend memory (scratch_rows_ of each).
  std::unique_ptr<int32_t, std::function<void(int32_t*)>> decode_ints_;
  std::vector<int32_t> host_ints_;
  // Graphs of decode steps by (stream buffer, rows, l0, l1): `warm` is the
  // backend's graph epoch after the last eager step of that shape, `epoch`
  // the one the graph was captured at.
  struct Captured {
    std::unique_ptr<ops::Backend<float>::Graph> graph;
    uint64_t epoch = 0, warm = ~uint64_t(0);
  };
  std::map<std::tuple<const float*, int, int, int>, Captured> graphs_;
  bool graphs_on_ = true;
  int64_t replays_ = 0, captures_ = 0;
};

}  // namespace strata
