// A small four-layer model and one plan of every layer kind on it: what the
// tests that must hold for every kind (recomputation, ZeRO's weight store)
// run through.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/plan.h"

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

// The plans the tests that must hold for every kind run: whole runs and
// hybrids of the first kinds (standard, skip, ladder, lp, parallel, par, spd),
// then every other kind's example from its row (kind_table(): a new kind joins
// these tests through its row). Benchmark-only kinds are left out.
inline const std::vector<std::string>& every_plan_kind() {
  static const std::vector<std::string> plans = [] {
    std::vector<std::string> p = {"standard*4",          "skip,standard*3",   "ladder*4",
                                  "standard*2,ladder*2", "lp*2,standard*2",   "parallel*4",
                                  "par*4;par_group=2",   "spd*4;spd_degree=2"};
    for (const KindInfo* k : kind_table())
      if (!k->benchmark_only && std::find(p.begin(), p.end(), k->example) == p.end())
        p.push_back(k->example);
    return p;
  }();
  return plans;
}

// The same as C strings (they live as long as the program).
inline const std::vector<const char*>& every_plan_kind_cstr() {
  static const std::vector<const char*> plans = [] {
    std::vector<const char*> p;
    for (const std::string& s : every_plan_kind()) p.push_back(s.c_str());
    return p;
  }();
  return plans;
}

}  // namespace strata::testing
