// Memory estimates (model/memory.h) against what the model really allocates,
// the limits they are checked against, and the one-line refusal.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/memory_info.h"
#include "model/layouts.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stage_runner.h"
#include "model/stages.h"
#include "testing.h"

namespace strata {
namespace {

LlamaConfig config(bool tied, bool bias, int layers = 4) {
  LlamaConfig c;
  c.vocab_size = 36;
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  c.finalize();
  return c;
}

// The estimate's weights, gradients and activations equal the arenas a model
// allocates for a training step, for every kind of plan.
TEST(Memory, EstimateEqualsTheModelsArenas) {
  for (const char* text :
       {"standard*4", "ladder*4", "standard,ladder*3", "lp*2,standard*2", "par*4;par_group=2",
        "parallel*4", "spd*4;spd_degree=2", "skip*2,standard*2"}) {
    for (bool tied : {false, true})
      for (bool bias : {false, true})
        for (Recompute recompute : {Recompute::None, Recompute::Selective, Recompute::Full}) {
          SCOPED_TRACE(cat(text, tied ? " tied" : "", bias ? " bias" : "", " recompute ",
                           recompute_name(recompute)));
          const LlamaConfig c = config(tied, bias);
          const LayerPlan plan = LayerPlan::parse(text, 4);
          Model<float> m(c, plan, ops::make_backend<float>());
          m.set_recompute(recompute);
          const int B = 3, T = 7;
          const auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
          m.init_weights(5);
          m.zero_grad();
          m.forward_backward(tokens.data(), tokens.data(), B, T, 1.0);
          MemoryUse u;
          u.gradients = true;
          u.optimizer_share = 1;
          u.batch = B, u.seq = T;
          u.recompute = recompute;
          const MemoryEstimate e = estimate_memory(c, plan, u);
          EXPECT_EQ(e.parameters, m.num_params());
          EXPECT_EQ(e.bytes_of("gradients"), m.num_params() * 4);
          EXPECT_EQ(e.bytes_of("AdamW moments"), 2 * m.num_params() * 4);
          EXPECT_EQ(e.bytes_of("activations"), m.activation_bytes());
          EXPECT_EQ(e.total(), e.bytes_of("weights") + e.bytes_of("gradients") +
                                   e.bytes_of("AdamW moments") + e.bytes_of("activations") +
                                   e.bytes_of("workspace"));
        }
  }
}

// A pipeline rank's figures: the weights of its stages' layers (and the
// embedding or head where it holds them), and one activation slot per
// micro-batch in flight, carved for its stage's layers and boundary streams.
TEST(Memory, PipelineStageEqualsTheStagesArenas) {
  for (const char* text : {"standard*4", "ladder*4", "lp*2,standard*2", "standard*2,spd*2"})
    for (bool tied : {false, true})
      for (Recompute recompute : {Recompute::None, Recompute::Full})
        for (int rank : {0, 1}) {
          SCOPED_TRACE(cat(text, tied ? " tied" : "", " recompute ", recompute_name(recompute),
                           " rank ", rank));
          const LlamaConfig c = config(tied, true);
          const LayerPlan plan = LayerPlan::parse(text, 4);
          const StageHolding holding = stage_holding({0, 2, 4}, 2, rank, {false, true});
          Model<float> m(c, plan, ops::make_backend<float>(), nullptr, WeightStoreFactory<float>(),
                         holding);
          m.set_recompute(recompute);
          m.init_weights(5);
          const int B = 3, T = 7, slots = 2;
          const auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
          ops::ActBuffer<float> in(&m.backend(), size_t(2 * B * T * c.hidden_size));
          m.backend().zero(in.data(), int64_t(in.size()));
          for (int k = 0; k < slots; ++k) {
            m.use_activation_slot(k);
            m.stage_forward(0, tokens.data(), tokens.data(), B, T, uint64_t(k), in.data());
          }
          MemoryUse u;
          u.gradients = true;
          u.optimizer_share = 1;
          u.batch = B, u.seq = T;
          u.recompute = recompute;
          u.stage = holding;
          u.activation_slots = slots;
          const MemoryEstimate e = estimate_memory(c, plan, u);
          EXPECT_EQ(e.parameters, m.num_params());
          EXPECT_EQ(e.bytes_of("activations"), m.activation_bytes());
          // A stage holds less than the whole model.
          EXPECT_LT(m.num_params(), Model<float>(c, plan, ops::make_backend<float>()).num_params());
        }
}

// Under tensor parallelism the figures are rank 0's layout, including plans
// that put a layer on half of the group (Layer Parallelism).
TEST(Memory, TensorParallelParametersMatchTheLayout) {
  for (const char* text : {"standard*4", "lp*2,standard*2", "lp*4"})
    for (int tp : {2, 4}) {
      SCOPED_TRACE(cat(text, " tp ", tp));
      LlamaConfig c = config(false, true);
      c.num_attention_heads = 8, c.num_key_value_heads = 4, c.head_dim = 4;
      c.finalize();
      const LayerPlan plan = LayerPlan::parse(text, 4);
      const ParamLayout layout(c, tp, 0, plan.tp_shards(tp));
      MemoryUse u;
      u.tp = tp;
      EXPECT_EQ(estimate_memory(c, plan, u).parameters, layout.total());
    }
}

// A KV cache is two [batch, kv heads of every layer, len, head_dim] floats.
TEST(Memory, KvCacheAndLogits) {
  const LlamaConfig c = config(false, false);
  MemoryUse u;
  u.kv_batch = 3, u.kv_len = 32, u.logits_rows = 5;
  const MemoryEstimate e = estimate_memory(c, LayerPlan::standard(4), u);
  EXPECT_EQ(e.bytes_of("KV cache"), 2 * 3 * (4 * 2) * 32 * 6 * 4);
  EXPECT_EQ(e.bytes_of("logits"), 5 * (36 + 2 * 24) * 4);
  EXPECT_EQ(e.bytes_of("gradients"), 0);
}

// A configuration claiming a million layers of a large model (1e14
// parameters) is estimated at once, without allocating in proportion to it.
TEST(Memory, AbsurdConfigurationIsCheap) {
  LlamaConfig c = config(false, false, 1000000);
  c.hidden_size = 8192, c.intermediate_size = 28672, c.num_attention_heads = 64;
  c.num_key_value_heads = 8, c.head_dim = 0;
  c.finalize();
  const auto t0 = std::chrono::steady_clock::now();
  MemoryUse u;
  u.gradients = true, u.optimizer_share = 1, u.batch = 8, u.seq = 4096;
  const MemoryEstimate e = estimate_memory(c, LayerPlan{}, u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
  EXPECT_GT(e.bytes_of("weights"), int64_t(3e15));
  EXPECT_GT(e.total(), 4 * e.bytes_of("weights"));
}

TEST(Memory, CheckRefusesInOneLineNamingTheNeedAndTheHint) {
  const LlamaConfig c = config(false, false);
  MemoryUse u;
  u.gradients = true;
  const MemoryEstimate e = estimate_memory(c, LayerPlan::standard(4), u);
  check_memory(e, {e.total(), "test"}, 1, "the job", "lower X");  // fits exactly
  check_memory(e, {-1, ""}, 1, "the job", "lower X");             // unknown: passes
  try {
    check_memory(e, {e.total() - 1, "MemAvailable"}, 1, "the job", "lower X");
    FAIL() << "no refusal";
  } catch (const Error& err) {
    const std::string msg = err.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    EXPECT_EQ(msg.rfind("the job needs about ", 0), 0u) << msg;
    EXPECT_NE(msg.find("weights "), std::string::npos) << msg;
    EXPECT_NE(msg.find("gradients "), std::string::npos) << msg;
    EXPECT_NE(msg.find("is available (MemAvailable); lower X"), std::string::npos) << msg;
  }
  // Processes on one machine share its memory.
  EXPECT_THROW(check_memory(e, {e.total() * 2 - 1, "m"}, 2, "job", "h"), Error);
  check_memory(e, {e.total() * 2, "m"}, 2, "job", "h");
  // STRATA_MEMORY_CHECK=0 turns the refusal into a warning.
  setenv("STRATA_MEMORY_CHECK", "0", 1);
  check_memory(e, {1, "m"}, 1, "job", "h");
  unsetenv("STRATA_MEMORY_CHECK");
}

TEST(Memory, AvailableMemoryFromTheMachineOrTheVariable) {
  unsetenv("STRATA_MEMORY_LIMIT");
  const MemoryLimit m = host_memory_available();
  EXPECT_GT(m.bytes, 0);  // Linux: at least MemAvailable
  EXPECT_FALSE(m.source.empty());
  setenv("STRATA_MEMORY_LIMIT", "3GB", 1);
  EXPECT_EQ(host_memory_available().bytes, int64_t(3e9));
  EXPECT_EQ(host_memory_available().source, "STRATA_MEMORY_LIMIT");
  setenv("STRATA_MEMORY_LIMIT", "2GiB", 1);
  EXPECT_EQ(host_memory_available().bytes, int64_t(2) << 30);
  setenv("STRATA_MEMORY_LIMIT", "lots", 1);
  EXPECT_THROW(host_memory_available(), Error);
  unsetenv("STRATA_MEMORY_LIMIT");
  EXPECT_EQ(human_bytes(1.65e9), "1.65 GB");
  EXPECT_EQ(human_bytes(512e6), "512.0 MB");
  EXPECT_EQ(human_bytes(96), "96 B");
}

// Inference holds no gradient arena: it appears with the first training use.
TEST(Memory, GradientArenaIsAllocatedOnFirstUse) {
  const LlamaConfig c = config(false, false);
  Model<float> m(c, ops::make_backend<float>());
  m.init_weights(1);
  std::vector<float> logits(size_t(2) * c.vocab_size);
  const std::vector<int32_t> tokens = {1, 2};
  m.forward_logits(tokens.data(), 1, 2, logits.data());
  EXPECT_EQ(m.gradient_bytes(), 0);
  m.zero_grad();
  EXPECT_EQ(m.gradient_bytes(), m.num_params() * 4);
  ASSERT_NE(m.grads(), nullptr);
  for (int64_t i = 0; i < m.num_params(); ++i) ASSERT_EQ(m.grads()[i], 0.0f);
}

// The layout planner: every option it lists is a valid layout whose figure is
// the estimate of that layout, the ones that fit come first in the order of
// the cost model, and a device between the estimates of two recompute modes
// admits exactly the layouts under it.
TEST(Memory, PlanLayoutsRanksWhatFits) {
  LlamaConfig c = config(false, false);
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.intermediate_size = 48;
  c.finalize();
  const LayerPlan plan = LayerPlan::standard(4);
  const int world = 4, seq = 16, micro = 4;
  const int64_t global = 32;  // sequences per step, kept by every layout
  MemoryUse u;
  u.gradients = true;
  u.optimizer_share = 1;
  u.dp = world;  // tp 1
  u.batch = micro, u.seq = seq;
  const int64_t none = estimate_memory(c, plan, u).total();
  u.recompute = Recompute::Full;
  const int64_t full = estimate_memory(c, plan, u).total();
  ASSERT_LT(full, none);
  const int64_t device = (none + full) / 2;
  LayoutSearch search;
  search.world = world, search.seq = seq, search.global_batch = global;
  search.max_micro_batch = micro, search.device_bytes = device;
  search.max_pp = 1;
  const auto layouts = plan_layouts(c, plan, search);
  ASSERT_FALSE(layouts.empty());
  std::set<int> tps;
  bool seen_unfit = false;
  double last_cost = 0;
  for (const LayoutOption& o : layouts) {
    SCOPED_TRACE(
        cat("tp ", o.tp, " zero ", o.zero, " ", recompute_name(o.recompute), " m ", o.micro_batch));
    EXPECT_EQ(o.tp * o.dp, world);
    EXPECT_EQ(c.num_attention_heads % o.tp, 0);
    EXPECT_LE(o.micro_batch, micro);
    EXPECT_EQ(int64_t(o.micro_batch) * o.grad_accum * o.dp, global);  // the batch is kept
    MemoryUse v;
    v.tp = o.tp;
    v.gradients = true;
    v.optimizer_share = o.zero ? 1.0 / o.dp : 1.0;
    v.dp = o.dp, v.zero = o.zero;
    v.batch = o.micro_batch, v.seq = seq;
    v.recompute = o.recompute;
    EXPECT_EQ(o.memory.total(), estimate_memory(c, plan, v).total());
    EXPECT_EQ(o.fits, o.memory.total() <= device);
    if (!o.fits) seen_unfit = true;
    EXPECT_FALSE(o.fits && seen_unfit) << "a layout that fits after one that does not";
    if (o.fits) {
      EXPECT_GE(o.cost, last_cost);
      last_cost = o.cost;
    }
    tps.insert(o.tp);
  }
  EXPECT_EQ(tps, (std::set<int>{1, 2, 4}));
  // tp 1, no ZeRO, the recipe's micro-batch: none does not fit, full does.
  auto find = [&](Recompute r) {
    for (const LayoutOption& o : layouts)
      if (o.tp == 1 && o.zero == 0 && o.micro_batch == micro && o.recompute == r) return o;
    ADD_FAILURE() << "missing layout";
    return LayoutOption{};
  };
  EXPECT_FALSE(find(Recompute::None).fits);
  EXPECT_TRUE(find(Recompute::Full).fits);
  // Full recomputation's 1.25, times the cost of 64-token micro-batches
  // (1 + 0.1 log2(4096 / 64)).
  EXPECT_NEAR(find(Recompute::Full).cost, 1.25 * 1.6, 1e-12);
  EXPECT_TRUE(layouts.front().fits);
}

// The planner with pipeline stages: every pp layout's figure is the largest of
// its pipeline ranks' estimates (each rank's stages, the head on every stage
// with early exits, one activation slot per micro-batch its schedule keeps),
// its stages are the trainer's split, its bubble the closed form, its cost
// the bubble times the stages' imbalance; ZeRO 0-3 each with data parallelism.
TEST(Memory, PlanLayoutsWithPipelineStages) {
  const LlamaConfig c = config(false, false, 8);
  const LayerPlan plan = LayerPlan::parse("lp*2,standard*6", 8);  // 7 units
  LayoutSearch s;
  s.world = 4, s.seq = 16, s.global_batch = 32, s.max_micro_batch = 4;
  s.device_bytes = int64_t(1) << 40;
  s.exits_on_every_stage = true;
  const auto layouts = plan_layouts(c, plan, s);
  std::set<std::tuple<int, int, int>> seen;  // pp, schedule, virtual stages
  std::set<int> zeros;                       // ZeRO stages with pp
  for (const LayoutOption& o : layouts) {
    SCOPED_TRACE(cat("tp ", o.tp, " pp ", o.pp, " ", pipeline::schedule_name(o.schedule), " v ",
                     o.virtual_stages, " zero ", o.zero, " m ", o.micro_batch));
    EXPECT_EQ(o.tp * o.pp * o.dp, s.world);
    EXPECT_EQ(int64_t(o.micro_batch) * o.grad_accum * o.dp, s.global_batch);
    if (o.pp == 1) continue;
    seen.insert({o.pp, int(o.schedule), o.virtual_stages});
    if (o.dp == 1) EXPECT_EQ(o.zero, 0);
    zeros.insert(o.zero);
    const int S = o.pp * o.virtual_stages;
    ASSERT_EQ(o.stage_first, stage_layers(plan, plan_stages(c, plan, s.seq, S).first));
    ASSERT_EQ(int(o.stage_bytes.size()), o.pp);
    int64_t most = 0;
    for (int r = 0; r < o.pp; ++r) {
      MemoryUse u;
      u.tp = o.tp;
      u.gradients = true;
      u.optimizer_share = o.zero ? 1.0 / o.dp : 1.0;
      u.dp = o.dp, u.zero = o.zero;
      u.batch = o.micro_batch, u.seq = s.seq;
      u.recompute = o.recompute;
      u.stage = stage_holding(o.stage_first, o.pp, r, std::vector<bool>(size_t(S), true));
      u.activation_slots = pipeline_slots(o.schedule, o.pp, o.grad_accum, o.virtual_stages, r);
      const int64_t bytes = estimate_memory(c, plan, u).total();
      EXPECT_EQ(o.stage_bytes[size_t(r)], bytes);
      most = std::max(most, bytes);
    }
    EXPECT_EQ(o.memory.total(), most);
    EXPECT_DOUBLE_EQ(o.bubble,
                     pipeline::bubble_formula(o.schedule, o.pp, o.grad_accum, o.virtual_stages));
    if (o.tp == 1 && o.zero == 0 && o.recompute == Recompute::None && o.micro_batch >= 4) {
      // The bubble's factor, never less (the imbalance is at least 1).
      const double vm = double(o.virtual_stages) * o.grad_accum;
      EXPECT_GE(o.cost, (vm + o.pp - 1) / vm - 1e-12);
      EXPECT_LT(o.cost, 2 * (vm + o.pp - 1) / vm);
    }
  }
  using pipeline::Schedule;
  EXPECT_EQ(seen, (std::set<std::tuple<int, int, int>>{{2, int(Schedule::GPipe), 1},
                                                       {2, int(Schedule::OneFOneB), 1},
                                                       {2, int(Schedule::Interleaved), 2},
                                                       {4, int(Schedule::GPipe), 1},
                                                       {4, int(Schedule::OneFOneB), 1}}))
      << "interleaved at pp 4 needs 8 units, the plan has 7";
  EXPECT_EQ(zeros, (std::set<int>{0, 1, 2, 3}));
  // Only 1F1B's memory and GPipe's cost: 1F1B comes first of the two.
  for (const LayoutOption& o : layouts)
    if (o.pp > 1) {
      EXPECT_NE(o.schedule, Schedule::GPipe) << "GPipe ranked before 1F1B";
      break;
    }
  // --max-pp 1 plans without stages.
  s.max_pp = 1;
  for (const LayoutOption& o : plan_layouts(c, plan, s)) EXPECT_EQ(o.pp, 1);
}

// Tensor parallelism across nodes costs more (pipeline stages and data
// parallelism do not): on a device that tp 4 fits best, four devices to a
// node take tp 4, two to a node a layout with tp 2 or less.
TEST(Memory, PlanLayoutsPutsTensorParallelismInsideANode) {
  LlamaConfig c = config(false, false, 8);
  c.hidden_size = 64, c.intermediate_size = 256, c.num_attention_heads = 4;
  c.num_key_value_heads = 4, c.vocab_size = 64;
  c.finalize();
  const LayerPlan plan = LayerPlan::standard(8);
  LayoutSearch s;
  s.world = 4, s.seq = 8, s.global_batch = 64, s.max_micro_batch = 4;
  MemoryUse u;
  u.tp = 4, u.gradients = true, u.optimizer_share = 1;
  u.batch = 4, u.seq = s.seq;
  s.device_bytes = estimate_memory(c, plan, u).total();  // tp 4, no recompute, m 4
  s.node_devices = 4;
  const LayoutOption one_node = plan_layouts(c, plan, s).front();
  EXPECT_EQ(one_node.tp, 4);
  const double small = 1 + 0.1 * std::log2(4096.0 / (4 * s.seq));  // 32-token micro-batches
  EXPECT_NEAR(one_node.cost, 1.1 * small, 1e-12);
  s.node_devices = 2;
  const auto two = plan_layouts(c, plan, s);
  EXPECT_TRUE(two.front().fits);
  EXPECT_LE(two.front().tp, 2);
  for (const LayoutOption& o : two)
    if (o.tp == 4 && o.recompute == Recompute::None && o.micro_batch == 4)
      EXPECT_NEAR(o.cost, 1.05 * 1.5 * small, 1e-12);  // two to a node, one doubling across
}

}  // namespace
}  // namespace strata
