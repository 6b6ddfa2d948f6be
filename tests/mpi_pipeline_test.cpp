// Pipeline parallelism against the whole model (issue 41): every rank builds
// the whole model (its tensor-parallel shard under --tp) and its pipeline
// stages' part with the same seed, runs one step's micro-batches through
// both, and checks that the losses, each early exit's loss and every
// gradient this rank holds agree, for every plan kind, the three schedules,
// LayerSkip's dropped layers and exits on several stages, tied embeddings,
// recomputation and bf16 activations. The messages each rank sends and
// receives per step are counted against the schedule's.
//
//   test_mpi_pipeline                          one process: p = 1, the
//                                              stages' boundaries are copies
//   mpirun -np N test_mpi_pipeline --pp P [--tp T]   N = dp x P x T
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/philox.h"
#include "model/model.h"
#include "model/stage_runner.h"
#include "model/stages.h"
#include "parallel/grid.h"

namespace strata {
namespace {

ProcessGrid* g_grid = nullptr;
int g_tp = 1, g_pp = 1;

LlamaConfig config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.attention_bias = true;
  c.tie_word_embeddings = tied;
  c.initializer_range = 0.2;
  c.finalize();
  return c;
}

// Norm weights and biases away from 1 and 0, by the element's full index (so
// every layout gets the same values).
void perturb(Model<float>& m) {
  const ParamLayout& L = m.layout();
  for (size_t t = 0; t < L.tensors().size(); ++t) {
    const ParamInfo& p = L[int(t)];
    if (p.is_matrix || p.numel == 0) continue;
    const PhiloxStream rng(77, 5, uint32_t(t));
    for (int64_t i = 0; i < p.numel; ++i)
      m.param(int(t))[i] += float(0.2 * rng.normal(uint64_t(L.full_index(int(t), i))));
  }
}

struct Case {
  std::string plan;
  bool tied = false;
  bool layerskip = false;  // dropped samples and exit losses on every unit boundary
  Recompute recompute = Recompute::None;
  bool bf16 = false;
};

struct Inputs {
  int B = 3, T = 8, m = 4;
  std::vector<std::vector<int32_t>> tokens, targets;
  std::vector<LayerSkipStep> skip;
};

Inputs make_inputs(const LlamaConfig& cfg, const LayerPlan& plan, bool layerskip, int m) {
  Inputs in;
  in.m = m;
  std::mt19937 rng(1234);
  const int L = cfg.num_hidden_layers;
  for (int j = 0; j < m; ++j) {
    std::vector<int32_t> x(size_t(in.B * in.T)), y(x.size());
    for (auto& v : x) v = int32_t(rng() % uint32_t(cfg.vocab_size));
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = i % 7 == 3 ? kIgnoreIndex : int32_t(rng() % uint32_t(cfg.vocab_size));
    in.tokens.push_back(x);
    in.targets.push_back(y);
    LayerSkipStep s;
    if (layerskip) {
      s.keep.assign(size_t(L), std::vector<uint8_t>(size_t(in.B), 1));
      s.exit_weight.assign(size_t(L), 0.0);
      for (const PlanUnit& u : plan.units()) {
        std::vector<uint8_t> k(size_t(in.B));
        for (auto& b : k) b = uint8_t(rng() % 3 != 0);
        for (int l = u.first; l < u.end(); ++l) s.keep[size_t(l)] = k;
        s.exit_weight[size_t(u.end() - 1)] = 0.1 * (u.end());
      }
      s.exit_weight[size_t(L - 1)] = 1.0;
    }
    in.skip.push_back(s);
  }
  return in;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-12, std::fabs(b)); }

// Runs the case at `p` ranks x `v` stages each with `schedule`; returns the
// step's message counts.
void check(const Case& k, pipeline::Schedule schedule, int v, int m = 4) {
  SCOPED_TRACE(k.plan + " " + pipeline::schedule_name(schedule) + " v=" + std::to_string(v) +
               (k.tied ? " tied" : "") + (k.layerskip ? " layerskip" : "") +
               (k.bf16 ? " bf16" : "") + (k.recompute != Recompute::None ? " recompute" : ""));
  const LlamaConfig cfg = config(k.tied);
  const LayerPlan plan = LayerPlan::parse(k.plan, cfg.num_hidden_layers);
  Communicator& pp = *g_grid->pp_comm;
  Communicator* tp = g_grid->tp_comm.get();
  const int p = pp.size(), S = p * v;
  ASSERT_GE(int(plan.units().size()), S) << "a test plan needs a unit per stage";
  const pipeline::StageSplit split = plan_stages(cfg, plan, 8, S);
  const std::vector<int> first = stage_layers(plan, split.first);
  const Inputs in = make_inputs(cfg, plan, k.layerskip, m);
  const double dloss = 1.0 / 50;

  auto setup = [&](Model<float>& model) {
    model.set_recompute(k.recompute);
    if (k.bf16) model.set_activation_storage(ops::Dtype::BF16);
    model.init_weights(11);
    perturb(model);
    model.zero_grad();
  };
  Model<float> whole(cfg, plan, ops::make_backend<float>("cpu"), tp);
  setup(whole);
  double ref_loss = 0;
  int64_t ref_valid = 0;
  std::vector<double> ref_exit(size_t(cfg.num_hidden_layers), 0.0);
  for (int j = 0; j < m; ++j) {
    const LayerSkipStep* skip = k.layerskip ? &in.skip[size_t(j)] : nullptr;
    const LossResult r = whole.forward_backward(
        in.tokens[size_t(j)].data(), in.targets[size_t(j)].data(), in.B, in.T, dloss, skip);
    ref_loss += r.loss_sum;
    ref_valid += r.n_valid;
    for (size_t l = 0; l < ref_exit.size(); ++l)
      if (!std::isnan(r.exit_loss_sum[l])) ref_exit[l] += r.exit_loss_sum[l];
  }

  const StageHolding holding =
      stage_holding(first, p, pp.rank(), std::vector<bool>(size_t(S), k.layerskip));
  Model<float> staged(cfg, plan, ops::make_backend<float>("cpu"), tp, WeightStoreFactory<float>(),
                      holding);
  setup(staged);
  StageRunner<float> runner(staged, pp, first, schedule, v);
  std::vector<MicroBatch> micro;
  for (int j = 0; j < m; ++j)
    micro.push_back({in.tokens[size_t(j)].data(), in.targets[size_t(j)].data(),
                     k.layerskip ? &in.skip[size_t(j)] : nullptr, uint64_t(j)});
  const auto res = runner.step(micro, in.B, in.T, dloss);
  sum_shared_gradients(staged, pp);

  // Losses: the head's on the last stage, each exit's on its stage.
  const double loss = pp.allreduce_sum(res.loss.loss_sum);
  const int64_t valid = pp.allreduce_sum(res.loss.n_valid);
  const double tol = k.bf16 ? 2e-3 : 1e-6;
  EXPECT_LT(rel(loss, ref_loss), tol) << loss << " vs " << ref_loss;
  EXPECT_EQ(valid, ref_valid);
  if (k.layerskip)
    for (int l = 0; l + 1 < cfg.num_hidden_layers; ++l) {
      const double x = res.loss.exit_loss_sum[size_t(l)];
      const double e = pp.allreduce_sum(std::isnan(x) ? 0.0 : x);
      if (ref_exit[size_t(l)] != 0) {
        EXPECT_LT(rel(e, ref_exit[size_t(l)]), tol) << "exit " << l;
      }
    }

  // Every gradient this rank holds, against the whole model's.
  const double gtol = k.bf16 ? 2e-2 : 1e-5;
  // bf16: rounding noise is measured against the model's largest gradient
  // too (small gradients are mostly rounding).
  double floor = 1e-6;
  if (k.bf16)
    for (size_t t = 0; t < whole.layout().tensors().size(); ++t)
      for (int64_t i = 0; i < whole.layout()[int(t)].numel; ++i)
        floor = std::max(floor, 1e-2 * std::fabs(double(whole.grad(int(t))[i])));
  int held = 0;
  for (size_t t = 0; t < staged.layout().tensors().size(); ++t) {
    const ParamInfo& info = staged.layout()[int(t)];
    if (!info.held) {
      EXPECT_EQ(info.numel, 0);
      continue;
    }
    ++held;
    // A key bias's gradient is zero but for rounding (softmax ignores a
    // shift of every score in a row): in bf16 it is noise alone.
    if (k.bf16 && info.name.find("k_proj.bias") != std::string::npos) continue;
    ASSERT_EQ(info.numel, whole.layout()[int(t)].numel) << info.name;
    const float* a = staged.grad(int(t));
    const float* b = whole.grad(int(t));
    double scale = floor, worst = 0;
    for (int64_t i = 0; i < info.numel; ++i) scale = std::max(scale, double(std::fabs(b[i])));
    for (int64_t i = 0; i < info.numel; ++i)
      worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    EXPECT_LE(worst / scale, gtol) << info.name;
  }
  EXPECT_GT(held, 0);

  // Messages: a forward sends to the next stage, a backward to the one below,
  // each to another rank unless p = 1.
  int64_t sends = 0;
  for (int s = pp.rank(); s < S; s += p) sends += int64_t(m) * ((s < S - 1) + (s > 0));
  if (p == 1) sends = 0;
  EXPECT_EQ(res.sends, sends);
  EXPECT_EQ(res.receives, sends);  // as many in as out, stage for stage
  if (schedule == pipeline::Schedule::OneFOneB && v == 1) {
    EXPECT_LE(res.max_slots, std::min(m, p - pp.rank()));
  }
  if (schedule == pipeline::Schedule::GPipe) {
    EXPECT_EQ(res.max_slots, m * v);
  }
}

const std::vector<std::string> kPlans = {
    "standard*8",
    "ladder*8",
    "standard,ladder*7",
    "ladder*4,standard*4",
    "standard*4,ladder*4",
    "lp*8",
    "standard*2,lp*4,standard*2;lp_alpha=0.3",
    "parallel*8",
    "par*8;par_group=2",
    "standard,shuffle*3,standard*4;shuffle_seed=9",
    "standard,skip,standard*6",
    "spd*8;spd_degree=2",
};

int virtual_stages_max(const std::string& plan) {
  const int units = int(LayerPlan::parse(plan, 8).units().size());
  return units / g_grid->pp_comm->size();
}

TEST(Pipeline, EveryPlanKindMatchesTheWholeModel) {
  for (const std::string& plan : kPlans) {
    check({plan}, pipeline::Schedule::OneFOneB, 1);
    if (virtual_stages_max(plan) >= 2) check({plan}, pipeline::Schedule::Interleaved, 2);
  }
}

TEST(Pipeline, ThreeSchedulesGiveTheSameNumbers) {
  for (const char* plan : {"standard*8", "ladder*8"}) {
    check({plan}, pipeline::Schedule::GPipe, 1);
    check({plan}, pipeline::Schedule::OneFOneB, 1);
    check({plan}, pipeline::Schedule::Interleaved, 2);
    if (virtual_stages_max(plan) >= 4) check({plan}, pipeline::Schedule::Interleaved, 4);
  }
}

TEST(Pipeline, LayerSkipExitsOnSeveralStages) {
  for (const char* plan : {"standard*8", "ladder*8", "lp*8"}) {
    check({plan, false, true}, pipeline::Schedule::OneFOneB, 1);
    check({plan, true, true}, pipeline::Schedule::GPipe, 1);
    if (virtual_stages_max(plan) >= 2)
      check({plan, false, true}, pipeline::Schedule::Interleaved, 2);
  }
}

TEST(Pipeline, TiedEmbeddingsOnTheFirstAndLastStage) {
  check({"standard*8", true}, pipeline::Schedule::OneFOneB, 1);
  check({"ladder*8", true}, pipeline::Schedule::Interleaved, 2);
}

TEST(Pipeline, RecomputationAndBf16Activations) {
  for (Recompute r : {Recompute::Full, Recompute::Selective}) {
    check({"standard*8", false, false, r}, pipeline::Schedule::OneFOneB, 1);
    check({"ladder*8", false, true, r}, pipeline::Schedule::Interleaved, 2);
  }
  check({"standard*8", false, false, Recompute::None, true}, pipeline::Schedule::OneFOneB, 1);
  check({"ladder*8", true, true, Recompute::None, true}, pipeline::Schedule::GPipe, 1);
}

TEST(Pipeline, MoreMicroBatchesThanStages) {
  check({"standard*8"}, pipeline::Schedule::OneFOneB, 1, 8);
  check({"ladder*8"}, pipeline::Schedule::Interleaved, 2, 8);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tp" && i + 1 < argc) strata::g_tp = std::atoi(argv[++i]);
    if (a == "--pp" && i + 1 < argc) strata::g_pp = std::atoi(argv[++i]);
  }
  strata::ProcessGrid grid = strata::make_grid(strata::g_tp, 0, strata::g_pp);
  strata::g_grid = &grid;
  const int rc = RUN_ALL_TESTS();
  const int64_t failed = grid.world->allreduce_sum(static_cast<int64_t>(rc != 0));
  grid = strata::ProcessGrid{};
  strata::finalize_mpi();
  return failed ? 1 : 0;
}
