#include "model/params.h"

#include <tuple>

#include "core/error.h"

namespace strata {

bool StageHolding::whole() const {
  for (bool b : layers)
    if (!b) return false;
  return embedding && head;
}

ParamLayout::ParamLayout(const LlamaConfig& cfg, int tp, int tp_rank,
                         const std::vector<TpShard>& shards, const StageHolding& stage)
    : tp_(tp), tp_rank_(tp_rank), shards_(shards), stage_(stage) {
  STRATA_CHECK(stage_.layers.empty() || int(stage_.layers.size()) == cfg.num_hidden_layers,
               "pipeline stage of ", stage_.layers.size(), " layers for a model of ",
               cfg.num_hidden_layers);
  STRATA_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "bad tensor-parallel rank ", tp_rank,
               " of ", tp);
  if (shards_.empty()) shards_.assign(size_t(cfg.num_hidden_layers), TpShard{0, tp});
  STRATA_CHECK(int(shards_.size()) == cfg.num_hidden_layers, "tensor-parallel layout of ",
               shards_.size(), " layers for a model of ", cfg.num_hidden_layers);
  for (const TpShard& s : shards_)
    STRATA_CHECK(s.ranks >= 1 && s.first >= 0 && s.first + s.ranks <= tp && tp % s.ranks == 0,
                 "tensor-parallel layout: ranks [", s.first, ", ", s.first + s.ranks,
                 ") do not fit a group of ", tp);
  auto divides = [&](int64_t n, const char* what) {
    STRATA_CHECK(n % tp == 0, "tensor parallelism: tp = ", tp, " must divide ", what, " (", n, ")");
  };
  divides(cfg.num_attention_heads, "num_attention_heads");
  divides(cfg.num_key_value_heads, "num_key_value_heads");
  divides(cfg.intermediate_size, "intermediate_size");
  divides(cfg.vocab_size, "vocab_size");
  const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t Q = cfg.q_dim(), KV = cfg.kv_dim();
  holding_ = stage_.embedding || (cfg.tie_word_embeddings && stage_.head);
  embed = add("model.embed_tokens.weight", {V, C}, -1, true, 0);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    holding_ = stage_.holds_layer(l);
    Layer L{};
    std::tie(L.parts, L.part) = share(l);
    L.input_norm = add(p + "input_layernorm.weight", {C}, l, true);
    L.q = add(p + "self_attn.q_proj.weight", {Q, C}, l, true, 0);
    L.k = add(p + "self_attn.k_proj.weight", {KV, C}, l, false, 0);
    L.v = add(p + "self_attn.v_proj.weight", {KV, C}, l, false, 0);
    if (cfg.attention_bias) {
      L.q_bias = add(p + "self_attn.q_proj.bias", {Q}, l, true, 0);
      L.k_bias = add(p + "self_attn.k_proj.bias", {KV}, l, false, 0);
      L.v_bias = add(p + "self_attn.v_proj.bias", {KV}, l, false, 0);
    }
    L.o = add(p + "self_attn.o_proj.weight", {C, Q}, l, true, 1);
    if (cfg.attention_bias) L.o_bias = add(p + "self_attn.o_proj.bias", {C}, l, true);
    L.post_norm = add(p + "post_attention_layernorm.weight", {C}, l, true);
    L.gate = add(p + "mlp.gate_proj.weight", {F, C}, l, true, 0);
    L.up = add(p + "mlp.up_proj.weight", {F, C}, l, false, 0);
    L.down = add(p + "mlp.down_proj.weight", {C, F}, l, true, 1);
    layers.push_back(L);
  }
  holding_ = stage_.head;
  final_norm = add("model.norm.weight", {C}, -1, true);
  if (!cfg.tie_word_embeddings) lm_head = add("lm_head.weight", {V, C}, -1, true, 0);
}

int ParamLayout::add(const std::string& name, std::vector<int64_t> shape, int layer, bool align,
                     int split_dim) {
  ParamInfo info;
  info.name = name;
  info.full_shape = shape;
  info.split_dim = tp_ > 1 ? split_dim : -1;
  if (info.split_dim >= 0) {
    std::tie(info.parts, info.part) = share(layer);
    shape[info.split_dim] = info.part < 0 ? 0 : shape[info.split_dim] / info.parts;
  }
  info.held = holding_;
  if (!holding_) {
    for (int64_t& d : shape) d = 0;
    info.part = -1;
  }
  info.numel = 1;
  for (int64_t d : shape) info.numel *= d;
  info.is_matrix = shape.size() == 2;
  info.shape = std::move(shape);
  info.layer = layer;
  // 64-byte alignment (16 floats) except inside a fused group, which must stay contiguous.
  if (align) total_ = (total_ + 15) / 16 * 16;
  info.offset = total_;
  total_ += info.numel;
  const int index = static_cast<int>(tensors_.size());
  by_name_[info.name] = index;
  tensors_.push_back(std::move(info));
  return index;
}

std::pair<int, int> ParamLayout::share(int layer) const {
  if (layer < 0) return {tp_, tp_rank_};
  const TpShard& sh = shards_[size_t(layer)];
  const bool holds = tp_rank_ >= sh.first && tp_rank_ < sh.first + sh.ranks;
  return {sh.ranks, holds ? tp_rank_ - sh.first : -1};
}

int64_t ParamLayout::full_index(int t, int64_t i) const {
  const ParamInfo& p = tensors_[t];
  if (p.split_dim < 0) return i;
  if (p.split_dim == 0) return int64_t(p.part) * p.numel + i;       // a block of rows
  const int64_t cols = p.shape[1], row = i / cols, col = i % cols;  // a block of columns
  return row * p.full_shape[1] + int64_t(p.part) * cols + col;
}

int ParamLayout::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

}  // namespace strata
