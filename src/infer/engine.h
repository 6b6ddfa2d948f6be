// The generation engine: incremental forward passes over a preallocated KV
// cache (one sequence), layer range by layer range, which is what plain
// decoding, early exit (layers [0, E) only) and self-speculative decoding
// (draft with [0, E), verify with [E, L)) are built from.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "ops/backend.h"

namespace strata {

class KvEngine {
 public:
  // A cache of `max_len` positions (at most the model's context) for layers
  // [0, layers) (default: all).
  KvEngine(Model<float>& model, int max_len, int layers = -1);

  int max_len() const { return max_len_; }
  int layers() const { return layers_; }
  // Positions cached in layer l.
  int length(int l) const { return len_[size_t(l)]; }
  // Drops positions >= len from layers [l0, l1) (rejected drafts).
  void crop(int l0, int l1, int len);
  void reset();

  // x[n, C] = embeddings of tokens[n] (host memory, like everything here).
  void embed(const int32_t* tokens, int n, float* x);
  // Runs x[n, C] (the residual stream of n consecutive new positions) through
  // layers [l0, l1), appending their keys and values; all those layers must
  // hold the same number of positions. In place.
  void run_layers(float* x, int n, int l0, int l1);
  // logits[n, V] = head(final_norm(x[n, C])).
  void logits(const float* x, int n, float* out);

 private:
  void ensure_scratch(int n);
  Model<float>& m_;
  ops::Backend<float>& be_;
  int max_len_, layers_;
  int C_, D_, Hq_, Hkv_, Q_, QKV_, F_;
  std::vector<int> len_;
  ops::DeviceBuffer<float> k_, v_;  // [layers, Hkv, max_len, D]
  int scratch_rows_ = 0;
  ops::DeviceBuffer<float> ln_, rstd_, qkv_, att_, mod_, gateup_, h_, xn_;
};

}  // namespace strata
