#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace strata {

namespace {

// The candidates sampling draws from: token ids sorted by logit (ties by id,
// so the order is deterministic), cut to top-k and top-p, with unnormalised
// weights exp((logit - max) / temperature) and their sum z.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double z = 0;
};

Candidates candidates(const float* logits, int V, const SamplingOptions& o) {
  Candidates c;
  c.ids.resize(size_t(V));
  std::iota(c.ids.begin(), c.ids.end(), 0);
  std::stable_sort(c.ids.begin(), c.ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int n = (o.top_k > 0 && o.top_k < V) ? o.top_k : V;
  c.weights.resize(size_t(n));
  const double mx = logits[c.ids[0]];
  for (int i = 0; i < n; ++i)
    c.z += c.weights[size_t(i)] = std::exp((double(logits[c.ids[size_t(i)]]) - mx) / o.temperature);
  if (o.top_p < 1.0) {  // smallest prefix with mass >= top_p
    double mass = 0;
    int keep = 0;
    while (keep < n && mass < o.top_p * c.z) mass += c.weights[size_t(keep++)];
    n = std::max(keep, 1);
    c.z = mass;
  }
  c.weights.resize(size_t(n));
  c.ids.resize(size_t(n));
  return c;
}

// Non-finite logits (weights that overflow, or a corrupt checkpoint) pick no
// token: generation stops with one line instead of printing noise.
void require_finite(const float* logits, int V, uint64_t draw) {
  for (int i = 0; i < V; ++i)
    if (!std::isfinite(logits[i])) [[unlikely]]
      fail(cat("the model's logits are not finite at position ", draw, " (", logits[i],
               " for token ", i,
               "): its weights overflow or are corrupt; nothing more is "
               "generated (strata inspect shows the checkpoint's tensors)"));
}

}  // namespace

int32_t sample_token(const float* logits, int V, const SamplingOptions& o, uint64_t draw) {
  STRATA_CHECK(V > 0, "sample_token: empty vocabulary");
  require_finite(logits, V, draw);
  STRATA_CHECK(o.temperature >= 0, "temperature must be >= 0, got ", o.temperature);
  STRATA_CHECK(o.top_p > 0 && o.top_p <= 1, "top-p must be in (0, 1], got ", o.top_p);
  if (o.temperature == 0.0) return int32_t(std::max_element(logits, logits + V) - logits);
  const Candidates c = candidates(logits, V, o);
  const double u = PhiloxStream(o.seed, /*purpose: sampling*/ 3, 0).uniform(draw) * c.z;
  double acc = 0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    acc += c.weights[i];
    if (u < acc) return c.ids[i];
  }
  return c.ids.back();
}

std::vector<double> token_distribution(const float* logits, int V, const SamplingOptions& o) {
  STRATA_CHECK(o.temperature > 0, "token_distribution: temperature must be > 0");
  require_finite(logits, V, 0);
  const Candidates c = candidates(logits, V, o);
  std::vector<double> p(size_t(V), 0.0);
  for (size_t i = 0; i < c.ids.size(); ++i) p[size_t(c.ids[i])] = c.weights[i] / c.z;
  return p;
}

int32_t sample_from(const std::vector<double>& p, double u) {
  double total = 0;
  for (double x : p) total += x;
  const double target = u * total;
  double acc = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    acc += p[i];
    last = int32_t(i);
    if (target < acc) return int32_t(i);
  }
  return last;
}

}  // namespace strata
