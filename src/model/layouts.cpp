// The layout planner (model/layouts.h).
#include "model/layouts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"
#include "model/stage_runner.h"
#include "model/stages.h"

namespace strata {
namespace {

// Relative step time per ZeRO stage and recompute mode (layouts.h).
constexpr double kZeroCost[4] = {1.0, 1.02, 1.03, 1.10};

double recompute_cost(Recompute r) {
  return r == Recompute::Full ? 1.25 : r == Recompute::Selective ? 1.01 : 1.0;
}

double tp_cost(int tp, int node) {
  double c = 1 + 0.05 * std::log2(double(std::min(tp, node > 0 ? node : tp)));
  if (node > 0 && (tp > node || node % tp))
    c *= 1 + 0.5 * std::max(1.0, std::log2(double(tp) / node));
  return c;
}

// One pipeline layout of the model: its stage split and what each pipeline
// rank holds, worked out once per (pp, schedule, stages per rank).
struct Pipe {
  int p = 1, v = 1;
  pipeline::Schedule kind = pipeline::Schedule::OneFOneB;
  std::vector<int> first;  // layers
  double imbalance = 1;    // c_max * S / C
  std::vector<StageHolding> holding;
};

// The micro-batches each pipeline rank keeps in flight (one activation slot
// each: pipeline_slots), cached per schedule and micro-batch count.
class Slots {
 public:
  const std::vector<int>& of(pipeline::Schedule k, int p, int m, int v) {
    auto [it, fresh] = cache_.try_emplace(std::make_tuple(int(k), p, m, v));
    if (fresh) it->second = pipeline_slots(k, p, m, v);
    return it->second;
  }

 private:
  std::map<std::tuple<int, int, int, int>, std::vector<int>> cache_;
};

// The pipeline layouts searched at degree p (one, with no stages, at p = 1).
std::vector<Pipe> pipes(const LlamaConfig& c, const LayerPlan& plan, int p, const LayoutSearch& s) {
  std::vector<Pipe> out;
  if (p == 1) return {Pipe{}};
  const int units = int(plan.units().size());
  std::vector<std::pair<pipeline::Schedule, int>> kinds = {{pipeline::Schedule::GPipe, 1},
                                                           {pipeline::Schedule::OneFOneB, 1}};
  for (int v : s.interleave)
    if (v >= 2) kinds.push_back({pipeline::Schedule::Interleaved, v});
  for (const auto& [kind, v] : kinds) {
    const int S = p * v;
    if (S > units) continue;
    Pipe pp;
    pp.p = p, pp.v = v, pp.kind = kind;
    const pipeline::StageSplit split = plan_stages(c, plan, s.seq, S);
    pp.first = stage_layers(plan, split.first);
    double total = 0, most = 0;
    for (double x : split.cost) total += x, most = std::max(most, x);
    pp.imbalance = total > 0 ? most * S / total : 1;
    for (int r = 0; r < p; ++r)
      pp.holding.push_back(
          stage_holding(pp.first, p, r, std::vector<bool>(size_t(S), s.exits_on_every_stage)));
    out.push_back(std::move(pp));
  }
  return out;
}

}  // namespace

std::vector<LayoutOption> plan_layouts(const LlamaConfig& cfg_in, const LayerPlan& plan,
                                       const LayoutSearch& s) {
  LlamaConfig c = cfg_in;
  c.finalize();
  const bool whole_plan = plan.num_layers() == c.num_hidden_layers;
  const int units = whole_plan ? int(plan.units().size()) : 1;
  Slots slots;
  std::vector<LayoutOption> out;
  for (int tp = 1; tp <= s.world; ++tp) {
    if (s.world % tp || c.num_attention_heads % tp || c.num_key_value_heads % tp ||
        c.intermediate_size % tp || c.vocab_size % tp)
      continue;
    try {
      if (whole_plan) plan.tp_shards(tp);
    } catch (const Error&) {
      continue;  // the plan cannot be laid out over tp ranks
    }
    for (int p = 1; p <= s.world / tp && p <= units; ++p) {
      if ((s.world / tp) % p || (s.max_pp > 0 && p > s.max_pp)) continue;
      const int dp = s.world / (tp * p);
      if (s.global_batch % dp) continue;  // the batch does not split over the replicas
      const int64_t per_rank = s.global_batch / dp;
      for (const Pipe& pipe : pipes(c, plan, p, s))
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
          for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full})
            for (int64_t m = std::min<int64_t>(per_rank, std::max(1, s.max_micro_batch)); m >= 1;
                 --m) {
              if (per_rank % m) continue;
              const int M = int(per_rank / m);  // micro-batches per step
              if (pipe.kind == pipeline::Schedule::Interleaved && M % p) continue;
              LayoutOption o;
              o.tp = tp, o.pp = p, o.dp = dp, o.zero = zero, o.recompute = rc;
              o.schedule = pipe.kind, o.virtual_stages = pipe.v;
              o.micro_batch = int(m), o.grad_accum = M;
              MemoryUse u;
              u.tp = tp;
              u.gradients = true;
              u.optimizer_share = s.trained_share / (zero == 1 ? dp : 1);
              u.dp = dp, u.zero = zero;
              u.batch = int(m), u.seq = s.seq;
              u.recompute = rc;
              u.bf16_activations = s.bf16_activations;
              u.bf16_weight_copies = s.bf16_weight_copies;
              if (p == 1) {
                o.memory = estimate_memory(c, plan, u);
              } else {
                const std::vector<int>& kept = slots.of(pipe.kind, p, M, pipe.v);
                for (int r = 0; r < p; ++r) {
                  u.stage = pipe.holding[size_t(r)];
                  u.activation_slots = kept[size_t(r)];
                  MemoryEstimate e = estimate_memory(c, plan, u);
                  o.stage_bytes.push_back(e.total());
                  if (r == 0 || e.total() > o.memory.total())
                    o.memory = std::move(e), o.binding = r;
                }
                o.stage_first = pipe.first;
                o.bubble = pipeline::bubble_formula(pipe.kind, p, M, pipe.v);
              }
              o.fits = o.memory.total() <= s.device_bytes;
              const double pipeline =
                  p == 1 ? 1 : double(pipe.v * M + p - 1) * pipe.imbalance / (double(pipe.v) * M);
              o.cost = recompute_cost(rc) * tp_cost(tp, s.node_devices) * kZeroCost[zero] *
                       (1 + 0.1 * std::max(0.0, std::log2(4096.0 / (double(m) * s.seq)))) *
                       pipeline;
              out.push_back(std::move(o));
            }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LayoutOption& a, const LayoutOption& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.cost != b.cost) return a.cost < b.cost;
    if (a.micro_batch != b.micro_batch) return a.micro_batch > b.micro_batch;  // fewer passes
    return a.memory.total() < b.memory.total();
  });
  return out;
}

}  // namespace strata
