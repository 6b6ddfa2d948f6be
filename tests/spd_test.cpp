// The spd kind (SPD, Sync-Point Drop): plan rules, every stream of SPD and
// hybrid plans at degree 2 and 4 against a double reference of the per-device
// maths built from explicitly sliced weights (tests/plan_reference.h), with
// and without the o_proj bias; degree 1 is the standard layer bitwise; KV-cache
// generation. Gradients: tests/model_grad_test.cpp; real tensor parallelism
// against the simulation: tests/mpi_model_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/model.h"
#include "plan_reference.h"
#include "reference.h"
#include "testing.h"

namespace strata {
namespace {

using testing::perturb_vectors;
using testing::reference_streams;
using testing::tensor;
using testing::worst_rel;

LlamaConfig spd_config(int layers, int kv_heads, bool bias) {
  LlamaConfig c = testing::plan_test_config(layers, !bias, bias);
  c.num_key_value_heads = kv_heads;
  c.finalize();
  return c;
}

TEST(Spd, PlanRules) {
  const LayerPlan p = LayerPlan::parse("standard,spd*2;spd_degree=4", 3);
  EXPECT_EQ(p.number("spd_degree", 2), 4);
  EXPECT_EQ(p.to_string(), "standard,spd*2;spd_degree=4");
  EXPECT_EQ(p.units().size(), 3u);  // one layer per unit: exits anywhere
  EXPECT_TRUE(p.unit_boundary(2));
  EXPECT_ERROR(LayerPlan::parse("spd*2;spd_degree=0", 2),
               "option 'spd_degree' must be a whole number in [1, 4096], got '0'");
  EXPECT_ERROR(LayerPlan::parse("spd,ladder", 2),
               "layer 1 is a ladder layer right after a spd layer");
  EXPECT_ERROR(LayerPlan::parse("standard*2;spd_degree=2", 2),
               "option 'spd_degree' belongs to spd layers and the plan has none");
  // The degree must split the heads and the MLP (4 heads, 2 kv heads here).
  EXPECT_ERROR(Model<double>(spd_config(2, 2, false), LayerPlan::parse("spd*2;spd_degree=4", 2),
                             ops::make_backend<double>()),
               "spd_degree = 4 must divide num_key_value_heads (2)");
  EXPECT_ERROR(Model<double>(spd_config(2, 4, false), LayerPlan::parse("spd*2;spd_degree=3", 2),
                             ops::make_backend<double>()),
               "spd_degree = 3 must divide num_attention_heads (4)");
}

// Every stream and the loss against the per-device reference.
TEST(Spd, StreamsMatchThePerDeviceMaths) {
  struct P {
    const char* text;
    int layers, kv;
  };
  for (const P& p : {P{"spd*2;spd_degree=2", 2, 2}, P{"spd*2;spd_degree=4", 2, 4},
                     P{"standard,spd,standard;spd_degree=2", 3, 2},
                     P{"ladder,spd*2,parallel;spd_degree=4", 4, 4}, P{"spd*2", 2, 2}})
    for (bool bias : {false, true}) {
      SCOPED_TRACE(std::string(p.text) + (bias ? " bias" : ""));
      const LayerPlan plan = LayerPlan::parse(p.text, p.layers);
      const LlamaConfig c = spd_config(p.layers, p.kv, bias);
      Model<double> m(c, plan, ops::make_backend<double>());
      m.init_weights(3);
      perturb_vectors(m, 4);
      const int B = 2, T = 6;
      const auto tokens = testing::random_tokens(B * T, c.vocab_size, 5);
      const auto targets = testing::random_tokens(B * T, c.vocab_size, 6);
      const LossResult r = m.forward(tokens.data(), targets.data(), B, T);
      const auto x = reference_streams(m, plan, tokens, B, T);
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LT(worst_rel(m.stream(int(i)), x[i]), 1e-12) << "stream " << i;
      const auto ce = reference::head_ce(
          x.back(), tensor(m, m.layout().final_norm),
          tensor(m, c.tie_word_embeddings ? m.layout().embed : m.layout().lm_head), targets, B * T,
          c.hidden_size, c.vocab_size, c.rms_norm_eps, ops::kIgnoreIndex);
      EXPECT_NEAR(r.loss_sum, ce.loss_sum, 1e-10 * std::abs(ce.loss_sum));
      // Dropping the sync point changes the function (it is an approximation).
      const auto standard = reference_streams(m, LayerPlan::standard(p.layers), tokens, B, T);
      EXPECT_GT(worst_rel(m.stream(int(x.size()) - 1), standard.back()), 1e-4);
    }
}

// Degree 1 (one rank: nothing to drop) runs the standard layer, bitwise:
// loss and every gradient.
TEST(Spd, DegreeOneIsStandardBitwise) {
  const LlamaConfig c = spd_config(3, 2, true);
  Model<float> a(c, LayerPlan::parse("spd*3;spd_degree=1", 3), ops::make_backend<float>());
  Model<float> b(c, LayerPlan::standard(3), ops::make_backend<float>());
  a.init_weights(9);
  b.init_weights(9);
  const int B = 2, T = 7;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 2);
  a.zero_grad();
  b.zero_grad();
  const LossResult ra = a.forward_backward(tokens.data(), targets.data(), B, T, 0.1);
  const LossResult rb = b.forward_backward(tokens.data(), targets.data(), B, T, 0.1);
  EXPECT_EQ(std::memcmp(&ra.loss_sum, &rb.loss_sum, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(a.grads(), b.grads(), sizeof(float) * size_t(a.num_params())), 0);
}

// KV-cache generation follows the same maths as the cache-free path.
TEST(Spd, GenerationEqualsNoCache) {
  for (const char* text : {"spd*2;spd_degree=2", "standard,spd;spd_degree=4"}) {
    SCOPED_TRACE(text);
    const LlamaConfig c = spd_config(2, 4, true);
    Model<float> m(c, LayerPlan::parse(text, 2), ops::make_backend<float>());
    m.init_weights(11);
    testing::expect_cache_matches_no_cache(m, 8);
  }
}

}  // namespace
}  // namespace strata
