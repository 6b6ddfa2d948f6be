// Model configuration, with Hugging Face LlamaConfig names so config.json files
// map one to one.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace strata {

// RoPE frequency scaling, as Hugging Face's rope_scaling. type "" is none;
// "linear" divides every frequency by factor; "llama3" (Llama 3.1) divides the
// low frequencies by factor, keeps the high ones and interpolates between
// (low_freq_factor, high_freq_factor, original_max_position_embeddings).
struct RopeScaling {
  std::string type;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

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
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q, k, v and o projections
  double initializer_range = 0.02;
  int bos_token_id = 1;
  int eos_token_id = 2;
  // config.json may give a list of EOS ids (Llama 3.1 Instruct: end of text,
  // of message, of turn): the first is eos_token_id, these the rest, written
  // back as the same list.
  std::vector<int> more_eos_token_ids;

  // Fills the derived defaults (kv heads, head_dim) and checks consistency;
  // throws strata::Error naming the field. `where` prefixes the message (a file name).
  void finalize(const std::string& where = "model config");

  int n_kv_heads() const { return num_key_value_heads; }
  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  // The head_dim / 2 rotary frequencies, scaling applied.
  std::vector<double> rope_inv_freq() const;

  // Parameter count (tied embeddings counted once).
  int64_t num_parameters() const;

  // Hugging Face config.json <-> LlamaConfig. Unknown keys in from_json are
  // ignored except ones that would change the maths (rope_scaling types other
  // than linear and llama3, mlp_bias, other activations), which are rejected.
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json to_json() const;
};

}  // namespace strata
