// The parameter layout: every tensor of the model, named as in Hugging Face,
// at a fixed offset in one contiguous arena. Gradients and optimizer moments
// use the same layout in arenas of their own.
//
// Tensors that one GEMM reads together are stored back to back: q, k, v
// projections (and their biases) form the fused [qkv_dim, C] matrix, gate and
// up form [2F, C]. They remain separate named tensors for checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/plan.h"

namespace strata {

struct ParamInfo {
  std::string name;            // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // this rank's shape: [out, in] for weights, [n] for vectors
  int64_t offset = 0;          // in elements, from the arena start
  int64_t numel = 0;
  int layer = -1;          // decoder layer, -1 for embedding / final norm / head
  bool is_matrix = false;  // 2-D: gets weight decay by default; init ~ N(0, std)
  // Tensor parallelism: the full tensor's shape, and the dimension along which
  // it is cut into `parts` equal contiguous parts (-1: replicated on every
  // rank). This rank holds part `part` (-1: none, numel 0); see ParamLayout.
  std::vector<int64_t> full_shape;
  int split_dim = -1;
  int parts = 1, part = 0;
  // Pipeline parallelism: whether this rank's stage holds the tensor at all
  // (numel 0 when not; see StageHolding).
  bool held = true;
};

// Pipeline parallelism: what one rank's stages hold of the model. Tensors
// outside keep their index and name (checkpoints stay full: each tensor comes
// from a rank that holds it) but take no memory. With tied embeddings the
// one embedding tensor is held by the stages holding the embedding or the head.
struct StageHolding {
  std::vector<bool> layers;  // per decoder layer; empty: every layer
  bool embedding = true;     // the token embedding (the first stage)
  bool head = true;          // the final norm and LM head (the last stage, and exit stages)
  // The stages' layer ranges [first, end), bottom up (several under the
  // interleaved schedule); empty: the held layers' contiguous runs.
  std::vector<std::pair<int, int>> chunks;
  bool holds_layer(int l) const { return layers.empty() || layers[size_t(l)]; }
  bool whole() const;  // every layer, the embedding and the head
};

class ParamLayout {
 public:
  // The layout of tensor-parallel rank `tp_rank` of `tp` (Megatron-LM style):
  // q/k/v and gate/up column-parallel (heads / MLP columns split, dim 0),
  // o and down row-parallel (dim 1), embedding and LM head vocab-parallel
  // (dim 0), norms and the o bias replicated. tp must divide the query and
  // key/value heads, intermediate_size and vocab_size. `shards` (one per
  // layer, LayerPlan::tp_shards; empty: the whole group for every layer) puts
  // a layer's split tensors on a subset of the ranks instead: a rank outside
  // it holds none of them (a Layer-Parallel pair's layer on the other half).
  // Checkpoints hold full tensors, so every layout reads and writes the same.
  // `stage`: the part of the model this pipeline rank holds (default all).
  explicit ParamLayout(const LlamaConfig& cfg, int tp = 1, int tp_rank = 0,
                       const std::vector<TpShard>& shards = {}, const StageHolding& stage = {});

  struct Layer {
    int input_norm, q, k, v, o, post_norm, gate, up, down;
    int q_bias = -1, k_bias = -1, v_bias = -1, o_bias = -1;  // with attention_bias
    // This rank's share of the layer's split tensors: part `part` (-1: none)
    // of `parts`.
    int parts = 1, part = 0;
  };

  const std::vector<ParamInfo>& tensors() const { return tensors_; }
  const ParamInfo& operator[](int i) const { return tensors_[i]; }
  // Index of a tensor by name; -1 if absent.
  int find(const std::string& name) const;
  int64_t total() const { return total_; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  const std::vector<TpShard>& shards() const { return shards_; }
  const StageHolding& stage() const { return stage_; }
  // Index in the full tensor of element `i` of this rank's part of tensor t.
  int64_t full_index(int t, int64_t i) const;

  int embed = -1, final_norm = -1;
  int lm_head = -1;  // -1 when tie_word_embeddings: the head is the embedding
  std::vector<Layer> layers;

 private:
  int add(const std::string& name, std::vector<int64_t> shape, int layer, bool align,
          int split_dim = -1);
  int tp_ = 1, tp_rank_ = 0;
  std::vector<TpShard> shards_;
  StageHolding stage_;
  bool holding_ = true;  // whether the tensors being added are held (add())
  // How a split tensor of `layer` (-1: outside the layers) is cut: {parts,
  // this rank's part or -1}.
  std::pair<int, int> share(int layer) const;
  std::vector<ParamInfo> tensors_;
  std::unordered_map<std::string, int> by_name_;
  int64_t total_ = 0;
};

}  // namespace strata
