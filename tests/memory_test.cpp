// Memory estimates (model/memory.h) against what the model really allocates,
// the limits they are checked against, and the one-line refusal.
#include <gtest/gtest.h>

#include <set>

#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/memory_info.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stage_runner.h"
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
  const auto layouts = plan_layouts(c, plan, world, seq, global, micro, device);
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
  EXPECT_NEAR(find(Recompute::Full).cost, 1.25, 1e-12);
  EXPECT_TRUE(layouts.front().fits);
}

}  // namespace
}  // namespace strata
