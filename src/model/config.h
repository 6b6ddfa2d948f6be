// Model configuration, with Hugging Face LlamaConfig names so config.json files
// map one to one.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace strata {

struct LlamaConfig {
  int vocab_size = 32000;
  int hidden_size = 4096;
  int intermediate_size = 11008;
  int num_hidden_layers = 32;
  int num_attention_heads = 32;
  int num_key_value_heads = 0;  // 0: same as num_attention_heads
  int head_dim = 0;             // 0: hidden_size / num_attention_heads
  int max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q, k, v and o projections
  double initializer_range = 0.02;
  int bos_token_id = 1;
  int eos_token_id = 2;

  // Fills the derived defaults (kv heads, head_dim) and checks consistency;
  // throws strata::Error naming the field. `where` prefixes the message (a file name).
  void finalize(const std::string& where = "model config");

  int n_kv_heads() const { return num_key_value_heads; }
  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }

  // Parameter count (tied embeddings counted once).
  int64_t num_parameters() const;

  // Hugging Face config.json <-> LlamaConfig. Unknown keys in from_json are
  // ignored except ones that would change the maths (rope_scaling, mlp_bias),
  // which are rejected when not supported.
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json to_json() const;
};

}  // namespace strata
