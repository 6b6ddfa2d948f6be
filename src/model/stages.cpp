// Pipeline stages of a model (model/stages.h).
#include "model/stages.h"

namespace strata {

double layer_forward_flops(const LlamaConfig& cfg, int seq) {
  const double h = cfg.hidden_size, q = cfg.q_dim(), kv = cfg.kv_dim(), ffn = cfg.intermediate_size;
  return 2 * (2 * h * q + 2 * h * kv) + 6 * h * ffn + 2 * q * double(seq);
}

std::vector<double> unit_costs(const LlamaConfig& cfg, const LayerPlan& plan, int seq) {
  const double layer = layer_forward_flops(cfg, seq);
  std::vector<double> out;
  for (const PlanUnit& u : plan.units()) {
    double c = 0;
    for (int l = u.first; l < u.end(); ++l)
      c += plan.kinds[size_t(l)] == LayerKind::Skip ? 0 : layer;
    out.push_back(c);
  }
  return out;
}

pipeline::StageSplit plan_stages(const LlamaConfig& cfg, const LayerPlan& plan, int seq, int pp) {
  return pipeline::partition_stages(unit_costs(cfg, plan, seq), double(cfg.hidden_size),
                                    2.0 * cfg.hidden_size * double(cfg.vocab_size), pp);
}

}  // namespace strata
