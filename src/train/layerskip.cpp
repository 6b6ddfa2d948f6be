#include "train/layerskip.h"

#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace strata {

void LayerSkipConfig::validate(int L, const std::string& where) const {
  auto bad = [&](const char* key, const std::string& msg) {
    fail(cat(where, ": layerskip.", key, ": ", msg));
  };
  if (!(p_max >= 0 && p_max < 1)) bad("p_max", cat("must be in [0, 1), got ", p_max));
  if (layer_scale != "exp" && layer_scale != "linear" && layer_scale != "const")
    bad("layer_scale", cat("unknown scale '", layer_scale, "' (exp, linear or const)"));
  if (time_scale != "none" && time_scale != "exp")
    bad("time_scale", cat("unknown scale '", time_scale, "' (none or exp)"));
  if (!(e_scale >= 0 && e_scale <= 1)) bad("e_scale", cat("must be in [0, 1], got ", e_scale));
  if (curriculum != "none" && curriculum != "rotational" && curriculum != "gradual")
    bad("curriculum", cat("unknown curriculum '", curriculum, "' (none, rotational or gradual)"));
  if (curriculum == "rotational" && (rotation < 1 || rotation > L))
    bad("rotation", cat("the rotational curriculum needs 1 <= rotation <= num_hidden_layers (", L,
                        "), got ", rotation));
  if (e_formula != "paper" && e_formula != "cumulative")
    bad("e_formula", cat("unknown formula '", e_formula, "' (paper or cumulative)"));
}

double layerskip_layer_scale(const std::string& kind, int l, int L) {
  if (kind == "const") return 1.0;
  if (L <= 1) return 1.0;
  const double x = double(l) / double(L - 1);
  return kind == "linear" ? x : std::exp(x * std::log(2.0)) - 1.0;
}

double layerskip_time_scale(const std::string& kind, int64_t t, int64_t T) {
  if (kind == "none" || T <= 1) return 1.0;
  return std::exp(double(t) * std::log(2.0) / double(T - 1)) - 1.0;
}

std::vector<double> layerskip_drop_rates(const LayerSkipConfig& c, int L, int64_t t, int64_t T) {
  std::vector<double> p(size_t(L), 0.0);
  if (!c.dropout()) return p;
  const double s = layerskip_time_scale(c.time_scale, t, T);
  for (int l = 0; l < L; ++l)
    p[size_t(l)] = s * layerskip_layer_scale(c.layer_scale, l, L) * c.p_max;
  return p;
}

std::vector<bool> layerskip_curriculum(const LayerSkipConfig& c, int L, int64_t t, int64_t T) {
  std::vector<bool> on(size_t(L), true);
  if (c.curriculum == "rotational") {
    for (int l = 0; l < L; ++l) on[size_t(l)] = (l % c.rotation) == (t % c.rotation);
  } else if (c.curriculum == "gradual") {
    // Layer l switches on at step (L-1-l) T / (2L): the last layer from the
    // start, one more every T/(2L) steps, every layer by about T/2.
    for (int l = 0; l < L; ++l)
      on[size_t(l)] = double(t) >= double(L - 1 - l) * double(T) / (2.0 * L);
  }
  if (c.always_last) on[size_t(L - 1)] = true;
  return on;
}

std::vector<double> layerskip_exit_scales(const LayerSkipConfig& c, const std::vector<bool>& on) {
  const int L = int(on.size());
  std::vector<double> e(size_t(L), 0.0);
  if (c.e_formula == "paper") {
    // e(l) = e_scale * sum_{i<=l} i for l < L-1; e(L-1) = (L-1) + e_scale * sum_{i<=L-2} i.
    for (int l = 0; l + 1 < L; ++l) e[size_t(l)] = c.e_scale * double(l) * double(l + 1) / 2.0;
    e[size_t(L - 1)] = double(L - 1) + c.e_scale * double(L - 2) * double(L - 1) / 2.0;
    if (L == 1) e[0] = 1.0;
  } else {
    // Cumulative sum of (l + 1) over the enabled layers, times e_scale except
    // for the last layer: every enabled exit, layer 0's included, gets weight.
    double cum = 0;
    for (int l = 0; l < L; ++l) {
      if (!on[size_t(l)]) continue;
      cum += double(l + 1);
      e[size_t(l)] = l == L - 1 ? cum : c.e_scale * cum;
    }
  }
  return e;
}

std::vector<double> layerskip_exit_weights(const LayerSkipConfig& c, int L, int64_t t, int64_t T) {
  std::vector<double> w(size_t(L), 0.0);
  if (!c.early_exit()) {
    w[size_t(L - 1)] = 1.0;
    return w;
  }
  const auto on = layerskip_curriculum(c, L, t, T);
  const auto e = layerskip_exit_scales(c, on);
  double sum = 0;
  for (int l = 0; l < L; ++l)
    if (on[size_t(l)]) sum += e[size_t(l)];
  if (sum <= 0) {
    w[size_t(L - 1)] = 1.0;
    return w;
  }
  for (int l = 0; l < L; ++l)
    if (on[size_t(l)]) w[size_t(l)] = e[size_t(l)] / sum;
  return w;
}

std::vector<std::vector<uint8_t>> layerskip_keep_masks(const LayerSkipConfig& c, int L, int64_t t,
                                                       int64_t T, uint64_t seed,
                                                       int64_t first_sample, int B) {
  std::vector<std::vector<uint8_t>> keep(size_t(L), std::vector<uint8_t>(size_t(B), 1));
  if (!c.dropout()) return keep;
  const auto p = layerskip_drop_rates(c, L, t, T);
  // Stream (seed, layer dropout, step); number (layer, global sample index).
  const PhiloxStream rng(seed, /*purpose "LSKP"*/ 0x4C534B50u, uint32_t(t));
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < B; ++b) {
      const uint64_t i = (uint64_t(l) << 40) + uint64_t(first_sample + b);
      keep[size_t(l)][size_t(b)] = rng.uniform(i) >= p[size_t(l)] ? 1 : 0;
    }
  return keep;
}

}  // namespace strata
