// Choosing the next token from logits: greedy (temperature 0) or sampling
// with temperature, top-k and top-p, from a seeded counter-based RNG so a
// (seed, position) pair always draws the same number.
#pragma once

#include <cstdint>

namespace strata {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no top-k cut
  double top_p = 1.0;        // 1: no nucleus cut
  uint64_t seed = 0;
};

// Picks a token from logits[V]; `draw` indexes the random stream (use the
// position of the token being generated).
int32_t sample_token(const float* logits, int V, const SamplingOptions& options, uint64_t draw);

}  // namespace strata
