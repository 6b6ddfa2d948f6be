#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace strata {

int32_t sample_token(const float* logits, int V, const SamplingOptions& o, uint64_t draw) {
  STRATA_CHECK(V > 0, "sample_token: empty vocabulary");
  STRATA_CHECK(o.temperature >= 0, "temperature must be >= 0, got ", o.temperature);
  STRATA_CHECK(o.top_p > 0 && o.top_p <= 1, "top-p must be in (0, 1], got ", o.top_p);
  if (o.temperature == 0.0) return int32_t(std::max_element(logits, logits + V) - logits);
  // Candidates sorted by logit (ties by id, so the order is deterministic).
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int n = (o.top_k > 0 && o.top_k < V) ? o.top_k : V;
  std::vector<double> p(n);
  const double mx = logits[idx[0]];
  double z = 0;
  for (int i = 0; i < n; ++i) z += p[i] = std::exp((double(logits[idx[i]]) - mx) / o.temperature);
  if (o.top_p < 1.0) {  // smallest prefix with mass >= top_p
    double mass = 0;
    int keep = 0;
    while (keep < n && mass < o.top_p * z) mass += p[keep++];
    n = std::max(keep, 1);
    z = mass;
  }
  const double u = PhiloxStream(o.seed, /*purpose: sampling*/ 3, 0).uniform(draw) * z;
  double acc = 0;
  for (int i = 0; i < n; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[n - 1];
}

std::vector<double> token_distribution(const float* logits, int V, const SamplingOptions& o) {
  STRATA_CHECK(o.temperature > 0, "token_distribution: temperature must be > 0");
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int n = (o.top_k > 0 && o.top_k < V) ? o.top_k : V;
  std::vector<double> q(static_cast<size_t>(n));
  const double mx = logits[idx[0]];
  double z = 0;
  for (int i = 0; i < n; ++i) z += q[size_t(i)] = std::exp((double(logits[idx[i]]) - mx) / o.temperature);
  if (o.top_p < 1.0) {
    double mass = 0;
    int keep = 0;
    while (keep < n && mass < o.top_p * z) mass += q[size_t(keep++)];
    n = std::max(keep, 1);
    z = mass;
  }
  std::vector<double> p(size_t(V), 0.0);
  for (int i = 0; i < n; ++i) p[size_t(idx[i])] = q[size_t(i)] / z;
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
