// A small four-layer model and one plan of every layer kind on it: what the
// tests that must hold for every kind (recomputation, ZeRO's weight store)
// run through.
#pragma once

#include "model/config.h"

namespace strata::testing {

inline LlamaConfig four_layer_config(bool tied = false) {
  LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.intermediate_size = 56;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.attention_bias = true;
  c.tie_word_embeddings = tied;
  c.finalize();
  return c;
}

// standard, skip, ladder (whole and hybrid), lp pairs, parallel, par groups, spd.
inline const char* const kEveryPlanKind[] = {
    "standard*4",          "skip,standard*3", "ladder*4",          "standard*2,ladder*2",
    "lp*2,standard*2",     "parallel*4",      "par*4;par_group=2", "spd*4;spd_degree=2"};

}  // namespace strata::testing
