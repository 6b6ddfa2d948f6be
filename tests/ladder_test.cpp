// The ladder kind (Ladder Residual): every stream of ladder and hybrid plans
// against a double reference of the recurrence written from the paper's
// equations with the reference ops, exits, generation with the KV cache
// against the cache-free path, self-speculative decoding, and the refusals.
// Gradients: tests/model_grad_test.cpp; tensor parallelism:
// tests/mpi_model_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "infer/generate.h"
#include "model/model.h"
#include "plan_reference.h"
#include "reference.h"
#include "testing.h"

namespace strata {
namespace {

using reference::Vec;
using testing::perturb_vectors;
using testing::prompt_of;
using testing::reference_streams;
using testing::tensor;
using testing::worst_rel;

LlamaConfig small_config(int layers, bool tied, bool bias) {
  return testing::plan_test_config(layers, tied, bias);
}

TEST(Ladder, EveryStreamMatchesTheRecurrence) {
  for (const char* text : {"ladder*4", "standard*2,ladder*2", "ladder,standard,ladder,standard",
                           "standard,ladder,skip,ladder", "standard*4", "parallel*4",
                           "parallel,ladder,skip,ladder", "standard,parallel,ladder,nocomm"}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(std::string(text) + (bias ? " bias" : ""));
      const LayerPlan plan = LayerPlan::parse(text, 4);
      Model<double> m(small_config(4, !bias, bias), plan, ops::make_backend<double>());
      testing::expect_streams_match_reference(m, plan);
    }
  }
}

// A ladder plan differs from the standard one on the same weights (the
// recurrence really changed), and an exit after layer E reads x_2E.
TEST(Ladder, ChangesTheFunctionAndExitsReadTheStream) {
  const LlamaConfig c = small_config(4, false, false);
  Model<double> lad(c, LayerPlan::parse("standard,ladder*3", 4), ops::make_backend<double>());
  Model<double> std_(c, ops::make_backend<double>());
  lad.init_weights(8);
  std::copy_n(lad.params(), lad.num_params(), std_.params());
  const int B = 1, T = 5;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 9);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 10);
  const double a = lad.forward(tokens.data(), targets.data(), B, T).loss_sum;
  const double s = std_.forward(tokens.data(), targets.data(), B, T).loss_sum;
  EXPECT_GT(std::abs(a - s), 1e-6);
  // Layer 0 is standard in both: their first two streams agree.
  const int64_t n = int64_t(B) * T * c.hidden_size;
  lad.forward(tokens.data(), targets.data(), B, T);
  std_.forward(tokens.data(), targets.data(), B, T);
  auto host = [](ops::ActIn<double> a) { return static_cast<const double*>(a); };
  for (int i = 0; i <= 2; ++i)
    EXPECT_TRUE(std::equal(host(lad.stream(i)), host(lad.stream(i)) + n, host(std_.stream(i))))
        << i;
  EXPECT_FALSE(std::equal(host(lad.stream(4)), host(lad.stream(4)) + n, host(std_.stream(4))));
}

std::unique_ptr<Model<float>> ladder_model(const char* plan, bool bias, uint64_t seed) {
  const LlamaConfig c = small_config(4, !bias, bias);
  auto m = std::make_unique<Model<float>>(c, LayerPlan::parse(plan, 4), ops::make_backend<float>());
  m->init_weights(seed);
  return m;
}

// The KV cache feeds the same stale streams as the full forward (prefill and
// decode use the same rule): generation equals the cache-free path, greedy
// and sampled, for ladder and hybrid plans.
TEST(Ladder, KvCacheEqualsNoCache) {
  for (const char* plan : {"ladder*4", "standard*2,ladder*2", "ladder,standard,ladder,standard"}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(plan);
      auto m = ladder_model(plan, bias, 12);
      testing::expect_cache_matches_no_cache(*m, 24);
    }
  }
}

// Early exit after layer E inside the ladder layers equals the model cut to
// its first E layers (x_2E materialised before the head); and batches.
TEST(Ladder, EarlyExitAndBatches) {
  auto m = ladder_model("standard,ladder*3", false, 14);
  LlamaConfig c3 = m->config();
  c3.num_hidden_layers = 3;
  Model<float> cut(c3, LayerPlan::parse("standard,ladder*2", 3), ops::make_backend<float>());
  testing::copy_by_name(*m, cut);
  GenerateOptions o;
  o.max_new_tokens = 16;
  const auto p = prompt_of(6, 4);
  const auto expected = generate_simple(cut, p, o);
  o.exit_layer = 3;
  EXPECT_EQ(generate(*m, p, o), expected);
  o.exit_layer = 0;
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(3, 5), prompt_of(9, 6),
                                                     prompt_of(1, 7)};
  const auto batch = generate_batch(*m, prompts, o);
  ASSERT_EQ(batch.size(), prompts.size());
  for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(batch[k], generate(*m, prompts[k], o));
}

// Self-speculative decoding verifies from layer E: where layer E is a ladder
// layer it reads the drafts' streams inside layer E - 1, which the draft pass
// hands over; greedy output equals plain greedy decoding at every E.
TEST(Ladder, SelfSpeculative) {
  auto m = ladder_model("ladder*2,standard,ladder", false, 16);
  GenerateOptions o;
  o.max_new_tokens = 20;
  const auto p = prompt_of(5, 8);
  const auto plain = generate(*m, p, o);
  o.exit_layer = 2;
  o.speculations = 3;
  EXPECT_EQ(generate(*m, p, o), plain);
  for (int E : {1, 3}) {  // ladder layers
    o.exit_layer = E;
    EXPECT_EQ(generate(*m, p, o), plain) << "E " << E;
  }
  auto all = ladder_model("ladder*4", true, 17);
  GenerateOptions g;
  g.max_new_tokens = 20;
  const auto want = generate(*all, p, g);
  g.speculations = 2;
  for (int E : {1, 2, 3}) {
    g.exit_layer = E;
    EXPECT_EQ(generate(*all, p, g), want) << "ladder*4, E " << E;
  }
}

// Without a tensor-parallel group there is nothing to leave out: nocomm is
// the standard layer, bitwise. Commands other than benchmarks refuse it.
TEST(Ladder, NoCommAloneIsStandardAndOnlyBenchmarksRunIt) {
  const LlamaConfig c = small_config(3, false, true);
  Model<float> a(c, LayerPlan::parse("nocomm*3", 3), ops::make_backend<float>());
  Model<float> b(c, ops::make_backend<float>());
  a.init_weights(2);
  std::copy_n(a.params(), a.num_params(), b.params());
  const auto tokens = testing::random_tokens(12, c.vocab_size, 3);
  a.zero_grad();
  b.zero_grad();
  const double la = a.forward_backward(tokens.data(), tokens.data(), 2, 6, 0.1).loss_sum;
  const double lb = b.forward_backward(tokens.data(), tokens.data(), 2, 6, 0.1).loss_sum;
  EXPECT_EQ(la, lb);
  EXPECT_TRUE(std::equal(a.grads(), a.grads() + a.num_params(), b.grads()));
  EXPECT_TRUE(LayerPlan::parse("standard,nocomm,standard", 3).benchmark_only());
  EXPECT_FALSE(LayerPlan::parse("ladder,parallel,skip", 3).benchmark_only());
  EXPECT_ERROR(LayerPlan::parse("standard,nocomm,standard", 3).check_not_benchmark_only("x"),
               "x: layer 1 of plan 'standard,nocomm,standard' is 'nocomm'", "only benchmarks");
}

// LayerSkip layer dropout: a dropped sample's module outputs are zero, so all
// of the unit's streams pass its input on whatever the recurrence; the kept
// samples run the recurrence. The gathered path (modules on the kept samples
// packed together) and the dense test path both match the reference.
TEST(Ladder, LayerSkipDropoutMatchesTheRecurrence) {
  const std::vector<std::vector<uint8_t>> keep = {{1, 0, 1}, {0, 0, 0}, {0, 1, 1}, {1, 1, 1}};
  for (const char* text : {"ladder*4", "standard*2,ladder*2", "ladder,standard,ladder,standard",
                           "parallel,ladder,skip,ladder", "standard*4"}) {
    for (bool dense : {false, true}) {
      SCOPED_TRACE(std::string(text) + (dense ? " dense" : " gathered"));
      const LlamaConfig c = small_config(4, true, true);
      const LayerPlan plan = LayerPlan::parse(text, 4);
      Model<double> m(c, plan, ops::make_backend<double>());
      m.init_weights(3);
      perturb_vectors(m, 4);
      const int B = 3, T = 5;
      const auto tokens = testing::random_tokens(B * T, c.vocab_size, 5);
      const auto targets = testing::random_tokens(B * T, c.vocab_size, 6);
      LayerSkipStep skip;
      skip.keep = keep;
      skip.dense_reference = dense;
      m.zero_grad();
      const LossResult r = m.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &skip);
      const auto x = reference_streams(m, plan, tokens, B, T, &keep);
      const auto plain = reference_streams(m, plan, tokens, B, T);
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LT(worst_rel(m.stream(int(i)), x[i]), 1e-12) << "stream " << i;
      EXPECT_NE(x.back(), plain.back());  // the masks changed the function
      const auto ce = reference::head_ce(x.back(), tensor(m, m.layout().final_norm),
                                         tensor(m, m.layout().embed), targets, B * T, c.hidden_size,
                                         c.vocab_size, c.rms_norm_eps, ops::kIgnoreIndex);
      EXPECT_NEAR(r.loss_sum, ce.loss_sum, 1e-10 * std::abs(ce.loss_sum));
      // Layer 1 drops everything: no gradient reaches its weights.
      const auto& P = m.layout().layers[1];
      for (int t = P.input_norm; t <= P.down; ++t)
        for (int64_t k = 0; k < m.layout()[t].numel; ++k)
          ASSERT_EQ(m.grad(t)[k], 0.0) << m.layout()[t].name;
    }
  }
}

}  // namespace
}  // namespace strata
