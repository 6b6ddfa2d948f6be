#include "model/params.h"

namespace strata {

ParamLayout::ParamLayout(const LlamaConfig& cfg) {
  const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t Q = cfg.q_dim(), KV = cfg.kv_dim();
  embed = add("model.embed_tokens.weight", {V, C}, -1, true);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer L{};
    L.input_norm = add(p + "input_layernorm.weight", {C}, l, true);
    L.q = add(p + "self_attn.q_proj.weight", {Q, C}, l, true);
    L.k = add(p + "self_attn.k_proj.weight", {KV, C}, l, false);
    L.v = add(p + "self_attn.v_proj.weight", {KV, C}, l, false);
    if (cfg.attention_bias) {
      L.q_bias = add(p + "self_attn.q_proj.bias", {Q}, l, true);
      L.k_bias = add(p + "self_attn.k_proj.bias", {KV}, l, false);
      L.v_bias = add(p + "self_attn.v_proj.bias", {KV}, l, false);
    }
    L.o = add(p + "self_attn.o_proj.weight", {C, Q}, l, true);
    if (cfg.attention_bias) L.o_bias = add(p + "self_attn.o_proj.bias", {C}, l, true);
    L.post_norm = add(p + "post_attention_layernorm.weight", {C}, l, true);
    L.gate = add(p + "mlp.gate_proj.weight", {F, C}, l, true);
    L.up = add(p + "mlp.up_proj.weight", {F, C}, l, false);
    L.down = add(p + "mlp.down_proj.weight", {C, F}, l, true);
    layers.push_back(L);
  }
  final_norm = add("model.norm.weight", {C}, -1, true);
  if (!cfg.tie_word_embeddings) lm_head = add("lm_head.weight", {V, C}, -1, true);
}

int ParamLayout::add(const std::string& name, std::vector<int64_t> shape, int layer, bool align) {
  ParamInfo info;
  info.name = name;
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

int ParamLayout::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

}  // namespace strata
