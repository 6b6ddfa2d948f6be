// Choosing the next token from logits: greedy (temperature 0) or sampling
// with temperature, top-k and top-p, from a seeded counter-based RNG so a
// (seed, position) pair always draws the same number.
#pragma once

#include <cstdint>
#include <vector>

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

// The distribution sample_token draws from, as probabilities over all V
// tokens (zero outside the top-k / top-p set). Temperature must be > 0.
std::vector<double> token_distribution(const float* logits, int V, const SamplingOptions& options);
// A token drawn from probabilities p (summing to about 1) with uniform u in [0, 1).
int32_t sample_from(const std::vector<double>& p, double u);

}  // namespace strata
