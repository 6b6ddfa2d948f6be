// Pipeline stages of a model: parallel/pipeline.h's optimal split with this
// model's costs. A unit costs its layers' FLOPs per token of a forward pass
// at sequence length `seq` (a backward is twice that for every unit alike,
// so it does not move the split):
//   a layer: 2 (2 h q_dim + 2 h kv_dim) for the projections, 6 h ffn for the
//     gated MLP, and 2 q_dim seq for the causal attention scores and their
//     weighted sum (seq / 2 keys on average, twice each); a skipped layer 0;
//     every other kind the same as a standard layer (they change the
//     communication, not the arithmetic);
//   the head (last stage): 2 h vocab; the embedding (first stage): h, a
//     lookup.
// Units (model/plan.h) are never split: an LP pair, a PAR group, a shuffle
// run stays on one stage.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/plan.h"
#include "parallel/pipeline.h"

namespace strata {

double layer_forward_flops(const LlamaConfig& cfg, int seq);
std::vector<double> unit_costs(const LlamaConfig& cfg, const LayerPlan& plan, int seq);
// Stage k holds units [split.first[k], split.first[k + 1]) of plan.units().
pipeline::StageSplit plan_stages(const LlamaConfig& cfg, const LayerPlan& plan, int seq, int pp);

}  // namespace strata
