// Activation recomputation (training.recompute = "selective" | "full"): the
// backward recomputes what was dropped from the module's input stream, so
// losses and every gradient are bitwise those of keeping the activations, for
// every plan kind, under LayerSkip's layer dropout (gathered and dense) with
// early exits, in fp32 and bf16; and the arena shrinks: none > selective > full.
#include <gtest/gtest.h>

#include <cstring>

#include "model/model.h"
#include "ops/backend.h"
#include "every_plan_kind.h"
#include "testing.h"

namespace strata {
namespace {

LlamaConfig config() { return testing::four_layer_config(); }

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;
  int64_t activation_bytes = 0;
};

Outcome train(const std::string& plan_text, Recompute recompute, bool bf16,
              const LayerSkipStep* skip) {
  const LlamaConfig c = config();
  Model<float> m(c, LayerPlan::parse(plan_text, c.num_hidden_layers), ops::make_backend<float>());
  // (The CPU backend's precision is the process's: set it either way.)
  m.backend().set_matmul_precision(bf16 ? ops::MatmulPrecision::BF16 : ops::MatmulPrecision::FP32);
  m.init_weights(11);
  m.set_recompute(recompute);
  const int B = 4, T = 9;
  m.zero_grad();
  Outcome r;
  // Two micro-batches accumulate, as with grad_accum_steps = 2.
  for (uint32_t step = 0; step < 2; ++step) {
    const auto tokens = testing::random_tokens(B * T, c.vocab_size, 10 + step);
    const auto targets = testing::random_tokens(B * T, c.vocab_size, 20 + step);
    const LossResult l = m.forward_backward(tokens.data(), targets.data(), B, T, 0.5, skip);
    r.losses.push_back(l.loss_sum);
    for (double e : l.exit_loss_sum) r.losses.push_back(e);
  }
  for (size_t i = 0; i < m.layout().tensors().size(); ++i) {
    const int64_t n = m.layout()[int(i)].numel;
    const float* g = m.grad(int(i));
    r.grads.emplace_back(g, g + n);
  }
  r.activation_bytes = m.activation_bytes();
  return r;
}

void expect_bitwise(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    if (!std::isnan(a.losses[i])) {
      EXPECT_EQ(a.losses[i], b.losses[i]) << "loss " << i;
    }
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t t = 0; t < a.grads.size(); ++t)
    EXPECT_EQ(std::memcmp(a.grads[t].data(), b.grads[t].data(), a.grads[t].size() * 4), 0)
        << "gradient of tensor " << t << " differs";
}

const auto& kPlans = testing::every_plan_kind_cstr();

TEST(Recompute, EqualsKeepingTheActivationsBitwise) {
  for (const char* plan : kPlans)
    for (bool bf16 : {false, true}) {
      const Outcome keep = train(plan, Recompute::None, bf16, nullptr);
      bool nonzero = false;
      for (const auto& g : keep.grads)
        for (float v : g) nonzero |= v != 0;
      EXPECT_TRUE(nonzero);
      int64_t previous = keep.activation_bytes;
      for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
        SCOPED_TRACE(cat(plan, bf16 ? " bf16 " : " fp32 ", recompute_name(mode)));
        const Outcome again = train(plan, mode, bf16, nullptr);
        expect_bitwise(keep, again);
        // none > selective > full (SPD blocks keep theirs under selective)
        if (mode == Recompute::Full || std::string(plan).rfind("spd", 0) != 0)
          EXPECT_LT(again.activation_bytes, previous);
        else
          EXPECT_EQ(again.activation_bytes, previous);
        previous = again.activation_bytes;
      }
    }
}

// LayerSkip: layer dropout (some samples, none, all) and early-exit losses.
TEST(Recompute, UnderLayerDropoutAndEarlyExits) {
  for (bool dense : {false, true})
    for (const char* plan : {"standard*4", "ladder*4", "lp*2,standard*2", "spd*4;spd_degree=2"})
      for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
        SCOPED_TRACE(cat(plan, dense ? " dense " : " gathered ", recompute_name(mode)));
        LayerSkipStep skip;
        skip.keep = {{1, 1, 1, 1}, {1, 0, 1, 0}, {0, 0, 0, 0}, {0, 1, 1, 1}};
        skip.exit_weight = {0.1, 0.2, 0.3, 1.0};
        if (std::string(plan).rfind("lp", 0) == 0) {  // layers 0-1 and 2-3 are units
          skip.keep[1] = skip.keep[0];
          skip.keep[3] = skip.keep[2];
          skip.exit_weight[0] = skip.exit_weight[2] = 0;
        }
        skip.dense_reference = dense;
        expect_bitwise(train(plan, Recompute::None, false, &skip), train(plan, mode, false, &skip));
      }
}

TEST(Recompute, ModeNames) {
  Recompute r = Recompute::None;
  for (const char* name : {"none", "selective", "full"}) {
    ASSERT_TRUE(parse_recompute(name, &r)) << name;
    EXPECT_STREQ(recompute_name(r), name);
  }
  EXPECT_FALSE(parse_recompute("partial", &r));
}

}  // namespace
}  // namespace strata
