#include "infer/spec_cost.h"

#include <cmath>

#include "core/error.h"

namespace strata {

double tokens_per_round(double alpha, int drafts) {
  STRATA_CHECK(alpha >= 0 && alpha <= 1 && drafts >= 0, "tokens_per_round: alpha ", alpha,
               " and drafts ", drafts, " out of range");
  if (alpha == 1) return drafts + 1;
  return (1 - std::pow(alpha, drafts + 1)) / (1 - alpha);
}

SpecCost bandwidth_bound_spec_cost(double layer_bytes, double head_bytes, int L, int E,
                                   double drafts, double tokens, double bw) {
  STRATA_CHECK(L >= 2 && E >= 1 && E < L && bw > 0, "bandwidth_bound_spec_cost: E ", E, " of ", L,
               " layers at ", bw, " bytes/s");
  SpecCost c;
  const double per_layer = layer_bytes / L;
  c.t_full = (layer_bytes + head_bytes) / bw;
  c.t_exit = (per_layer * E + head_bytes) / bw;
  c.t_verify = (per_layer * (L - E) + head_bytes) / bw;
  c.drafts = drafts;
  c.tokens = tokens;
  return c;
}

}  // namespace strata
