// LayerSkip training schedules (Elhoushi et al. 2024; specs A.2-A.4): the
// layer-dropout rate p_{l,t} = S(t) D(l) p_max, the per-sample keep masks, and
// the early-exit loss weights e~(t, l) under the rotational, gradual or no
// curriculum. Layers l are 0-based; exit l is the output of layer l (x_{l+1}),
// exit L-1 the ordinary last-layer loss. Steps t are 0-based optimizer steps of
// T in total.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct LayerSkipConfig {
  // Layer dropout.
  double p_max = 0;  // rate of the last layer at the end (0: off)
  std::string layer_scale =
      "exp";  // D(l): "exp" (2^{l/(L-1)} - 1), "linear" (l/(L-1)), "const" (1)
  std::string time_scale = "none";  // S(t): "none" (1) or "exp" (2^{t/(T-1)} - 1)
  // Early-exit loss.
  double e_scale = 0;               // 0: only the last layer's loss (no early exit)
  std::string curriculum = "none";  // "none" (every layer), "rotational", "gradual"
  int rotation = 0;                 // R of the rotational curriculum (>= 1)
  bool always_last = true;          // the last layer's loss is always on
  std::string e_formula = "paper";  // e(l): "paper" (as printed) or "cumulative" (torchtune-like)

  bool dropout() const { return p_max > 0; }
  bool early_exit() const { return e_scale > 0; }
  bool enabled() const { return dropout() || early_exit(); }
  // Throws strata::Error naming the key of an invalid value (`where` prefixes it).
  void validate(int num_layers, const std::string& where) const;
};

// D(l) for l in [0, L).
double layerskip_layer_scale(const std::string& kind, int l, int L);
// S(t) for t in [0, T); T = 1 gives 1.
double layerskip_time_scale(const std::string& kind, int64_t t, int64_t T);
// p_{l,t} for every layer.
std::vector<double> layerskip_drop_rates(const LayerSkipConfig& c, int L, int64_t t, int64_t T);

// C(t, l) for every layer.
std::vector<bool> layerskip_curriculum(const LayerSkipConfig& c, int L, int64_t t, int64_t T);
// Un-normalised e(l) for every layer given the enabled set.
std::vector<double> layerskip_exit_scales(const LayerSkipConfig& c, const std::vector<bool>& on);
// e~(t, l): C e / sum C e, summing to 1. Without early exit (e_scale = 0), or
// when no enabled layer has a positive weight, the last layer gets 1.
std::vector<double> layerskip_exit_weights(const LayerSkipConfig& c, int L, int64_t t, int64_t T);

// Keep masks of B samples of step t: keep[l][b] = 1 when sample
// first_sample + b runs layer l. Bernoulli(1 - p_{l,t}) from the Philox stream
// keyed by (seed, step, layer, global sample index), the index of the sample
// in the step's global batch (micro-batch m of dp rank r with B samples per
// rank starts at (m * dp + r) * B). Every rank can compute any sample's mask:
// tensor-parallel ranks (same samples) draw the same masks, and a run at dp=2
// drops exactly the samples a single process drops.
std::vector<std::vector<uint8_t>> layerskip_keep_masks(const LayerSkipConfig& c, int L, int64_t t,
                                                       int64_t T, uint64_t seed,
                                                       int64_t first_sample, int B);

}  // namespace strata
