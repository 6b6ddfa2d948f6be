#include "model/config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"

namespace strata {

void LlamaConfig::finalize(const std::string& where) {
  auto positive = [&](int v, const char* key) {
    STRATA_CHECK(v > 0, where, ": ", key, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_key_value_heads == 0) num_key_value_heads = num_attention_heads;
  positive(num_key_value_heads, "num_key_value_heads");
  STRATA_CHECK(num_attention_heads % num_key_value_heads == 0, where, ": num_attention_heads (",
               num_attention_heads, ") must be a multiple of num_key_value_heads (",
               num_key_value_heads, ")");
  if (head_dim == 0) {
    STRATA_CHECK(hidden_size % num_attention_heads == 0, where, ": hidden_size (", hidden_size,
                 ") is not divisible by num_attention_heads (", num_attention_heads,
                 "); set head_dim explicitly");
    head_dim = hidden_size / num_attention_heads;
  }
  positive(head_dim, "head_dim");
  STRATA_CHECK(head_dim % 2 == 0, where, ": head_dim must be even for RoPE, got ", head_dim);
  // The widths the model computes in int (q_dim(), qkv_dim()) and the
  // parameter count (int64) must not overflow: a garbage config stops here.
  const int64_t q = int64_t(num_attention_heads) * head_dim;
  const int64_t kv = int64_t(num_key_value_heads) * head_dim;
  STRATA_CHECK(q + 2 * kv <= std::numeric_limits<int>::max(), where,
               ": num_attention_heads x head_dim (", q, ") and num_key_value_heads x head_dim (",
               kv, ") are too large");
  const double C = hidden_size, F = intermediate_size, V = vocab_size;
  const double params =
      2 * V * C + num_hidden_layers * (C * double(q + 2 * kv) + double(q) * C + 3 * C * F + 2 * C +
                                       double(q + 2 * kv + C));
  STRATA_CHECK(params <= 1e15, where, ": the config describes about ", params,
               " parameters, more than any model (vocab_size, hidden_size, intermediate_size or "
               "num_hidden_layers is implausible)");
  auto positive_finite = [&](double v, const char* key) {
    STRATA_CHECK(std::isfinite(v) && v > 0, where, ": ", key, " must be positive and finite, got ",
                 v);
  };
  positive_finite(rope_theta, "rope_theta");
  positive_finite(rms_norm_eps, "rms_norm_eps");
  positive_finite(initializer_range, "initializer_range");
  if (!rope_scaling.type.empty()) {
    STRATA_CHECK(rope_scaling.type == "llama3" || rope_scaling.type == "linear", where,
                 ": unknown rope_scaling type '", rope_scaling.type, "'");
    positive_finite(rope_scaling.factor, "rope_scaling.factor");
    if (rope_scaling.type == "llama3")
      STRATA_CHECK(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
                       rope_scaling.low_freq_factor > 0 &&
                       std::isfinite(rope_scaling.high_freq_factor) &&
                       rope_scaling.original_max_position_embeddings > 0,
                   where, ": rope_scaling (llama3) needs 0 < low_freq_factor < high_freq_factor ",
                   "(finite) and original_max_position_embeddings > 0");
  }
}

std::vector<double> LlamaConfig::rope_inv_freq() const {
  const int half = head_dim / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) f[i] = std::pow(rope_theta, -2.0 * i / head_dim);
  const RopeScaling& s = rope_scaling;
  if (s.type == "linear") {
    for (double& x : f) x /= s.factor;
  } else if (s.type == "llama3") {
    // Wavelengths longer than the original context / low_freq_factor are
    // scaled down by factor, those shorter than original / high_freq_factor
    // kept, and the band between interpolated linearly in 1/wavelength.
    const double old_ctx = s.original_max_position_embeddings;
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * M_PI / x;
      if (wavelen > low_wavelen) {
        x /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
  }
  return f;
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t C = hidden_size, F = intermediate_size, V = vocab_size;
  const int64_t attn = C * qkv_dim() + int64_t(q_dim()) * C + (attention_bias ? qkv_dim() + C : 0);
  const int64_t layer = attn + 3 * C * F + 2 * C;
  return V * C + num_hidden_layers * layer + C + (tie_word_embeddings ? 0 : V * C);
}

LlamaConfig LlamaConfig::from_json(const nlohmann::json& j, const std::string& where) {
  STRATA_CHECK(j.is_object(), where, ": expected a JSON object");
  LlamaConfig c;
  auto get_int = [&](const char* key, int& out, bool required) {
    if (!j.contains(key) || j[key].is_null()) {
      STRATA_CHECK(!required, where, ": missing required field '", key, "'");
      return;
    }
    const auto& v = j[key];
    STRATA_CHECK(v.is_number_integer(), where, ": field '", key, "' must be an integer");
    // Read wide, then range-checked: get<int>() would wrap 4294967297 to 1.
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                          : v.get<int64_t>() >= std::numeric_limits<int>::min() &&
                                v.get<int64_t>() <= std::numeric_limits<int>::max();
    STRATA_CHECK(fits, where, ": field '", key, "' is ", v.dump(), ", out of range for an integer");
    out = int(v.get<int64_t>());
  };
  auto get_double = [&](const char* key, double& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    STRATA_CHECK(j[key].is_number(), where, ": field '", key, "' must be a number");
    out = j[key].get<double>();
  };
  auto get_bool = [&](const char* key, bool& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    STRATA_CHECK(j[key].is_boolean(), where, ": field '", key, "' must be true or false");
    out = j[key].get<bool>();
  };
  get_int("vocab_size", c.vocab_size, true);
  get_int("hidden_size", c.hidden_size, true);
  get_int("intermediate_size", c.intermediate_size, true);
  get_int("num_hidden_layers", c.num_hidden_layers, true);
  get_int("num_attention_heads", c.num_attention_heads, true);
  get_int("num_key_value_heads", c.num_key_value_heads, false);
  get_int("head_dim", c.head_dim, false);
  get_int("max_position_embeddings", c.max_position_embeddings, false);
  get_int("bos_token_id", c.bos_token_id, false);
  if (j.contains("eos_token_id") && j["eos_token_id"].is_array()) {
    const auto& ids = j["eos_token_id"];
    STRATA_CHECK(!ids.empty(), where, ": field 'eos_token_id' is an empty list");
    for (size_t i = 0; i < ids.size(); ++i) {
      STRATA_CHECK(ids[i].is_number_integer() && ids[i].get<int64_t>() >= 0 &&
                       ids[i].get<int64_t>() <= std::numeric_limits<int>::max(),
                   where, ": field 'eos_token_id' has ", ids[i].dump(), ", not a token id");
      (i == 0 ? c.eos_token_id : c.more_eos_token_ids.emplace_back()) = int(ids[i].get<int64_t>());
    }
  } else {
    get_int("eos_token_id", c.eos_token_id, false);
  }
  get_double("rope_theta", c.rope_theta);
  get_double("rms_norm_eps", c.rms_norm_eps);
  get_double("initializer_range", c.initializer_range);
  get_bool("tie_word_embeddings", c.tie_word_embeddings);
  get_bool("attention_bias", c.attention_bias);
  bool mlp_bias = false;
  get_bool("mlp_bias", mlp_bias);
  STRATA_CHECK(!mlp_bias, where, ": mlp_bias = true is not supported");
  // transformers 4 writes rope_theta and rope_scaling; transformers 5 writes
  // rope_parameters = {rope_theta, rope_type, scaling fields}.
  const char* rope_key = j.contains("rope_parameters") && !j["rope_parameters"].is_null()
                             ? "rope_parameters"
                             : "rope_scaling";
  if (std::string(rope_key) == "rope_parameters") {
    STRATA_CHECK(j[rope_key].is_object(), where, ": rope_parameters must be an object");
    if (j[rope_key].contains("rope_theta")) {
      STRATA_CHECK(j[rope_key]["rope_theta"].is_number(), where,
                   ": rope_parameters.rope_theta must be a number");
      c.rope_theta = j[rope_key]["rope_theta"].get<double>();
    }
  }
  if (j.contains(rope_key) && !j[rope_key].is_null()) {
    const auto& rs = j[rope_key];
    STRATA_CHECK(rs.is_object(), where, ": ", rope_key, " must be an object or null");
    const char* type_key = rs.contains("rope_type") ? "rope_type" : "type";
    STRATA_CHECK(!rs.contains(type_key) || rs[type_key].is_string(), where, ": ", rope_key, ".",
                 type_key, " must be a string");
    const std::string type = rs.contains(type_key) ? rs[type_key].get<std::string>() : "default";
    STRATA_CHECK(type == "llama3" || type == "linear" || type == "default", where, ": ", rope_key,
                 " type '", one_line(type), "' is not supported (llama3, linear)");
    if (type != "default") {
      c.rope_scaling.type = type;
      auto num = [&](const char* key, double& out, bool required) {
        if (!rs.contains(key)) {
          STRATA_CHECK(!required, where, ": ", rope_key, ".", key, " is missing");
          return;
        }
        STRATA_CHECK(rs[key].is_number(), where, ": ", rope_key, ".", key, " must be a number");
        out = rs[key].get<double>();
      };
      num("factor", c.rope_scaling.factor, true);
      if (type == "llama3") {
        double orig = 0;
        num("low_freq_factor", c.rope_scaling.low_freq_factor, true);
        num("high_freq_factor", c.rope_scaling.high_freq_factor, true);
        num("original_max_position_embeddings", orig, true);
        STRATA_CHECK(
            orig >= 1 && orig <= std::numeric_limits<int>::max() && orig == std::floor(orig), where,
            ": ", rope_key,
            ".original_max_position_embeddings must be a whole number of positions, got ", orig);
        c.rope_scaling.original_max_position_embeddings = int(orig);
      }
    }
  }
  if (j.contains("hidden_act") && j["hidden_act"].is_string())
    STRATA_CHECK(j["hidden_act"] == "silu", where, ": hidden_act '",
                 one_line(j["hidden_act"].get<std::string>()), "' is not supported (only silu)");
  c.finalize(where);
  return c;
}

nlohmann::json LlamaConfig::to_json() const {
  nlohmann::json rope = nullptr;
  if (rope_scaling.type == "linear")
    rope = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
  else if (rope_scaling.type == "llama3")
    rope = {{"rope_type", "llama3"},
            {"factor", rope_scaling.factor},
            {"low_freq_factor", rope_scaling.low_freq_factor},
            {"high_freq_factor", rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  nlohmann::json j{{"rope_scaling", rope},
                   {"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"hidden_act", "silu"},
                   {"vocab_size", vocab_size},
                   {"hidden_size", hidden_size},
                   {"intermediate_size", intermediate_size},
                   {"num_hidden_layers", num_hidden_layers},
                   {"num_attention_heads", num_attention_heads},
                   {"num_key_value_heads", num_key_value_heads},
                   {"head_dim", head_dim},
                   {"max_position_embeddings", max_position_embeddings},
                   {"rope_theta", rope_theta},
                   {"rms_norm_eps", rms_norm_eps},
                   {"tie_word_embeddings", tie_word_embeddings},
                   {"attention_bias", attention_bias},
                   {"mlp_bias", false},
                   {"initializer_range", initializer_range},
                   {"bos_token_id", bos_token_id},
                   {"eos_token_id", eos_token_id}};
  if (!more_eos_token_ids.empty()) {
    nlohmann::json ids = {eos_token_id};
    for (int id : more_eos_token_ids) ids.push_back(id);
    j["eos_token_id"] = ids;
  }
  return j;
}

}  // namespace strata
