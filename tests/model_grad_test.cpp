// Whole-model gradient check in double precision: every parameter tensor of a
// tiny Llama (tied and untied head, MHA and GQA, with and without attention
// biases, a head dimension unrelated to hidden_size / heads) against central
// finite differences of the loss, entry by entry; with a plan that skips a
// layer (whose gradients must then be zero, which the check also confirms);
// and with ladder layers, alone and mixed with standard ones (deferred
// residuals and input gradients crossing unit boundaries).
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "model/model.h"
#include "testing.h"

namespace strata {
namespace {

struct Case {
  const char* name;
  bool tied;
  int kv_heads;
  bool bias;
  int head_dim;
  const char* plan = "";  // default: all standard
  int layers = 2;
};

class ModelGrad : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGrad, EveryParameterTensor) {
  const Case k = GetParam();
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_hidden_layers = k.layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = k.kv_heads;
  c.head_dim = k.head_dim;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = k.tied;
  c.attention_bias = k.bias;
  c.initializer_range = 0.4;
  c.finalize();
  const LayerPlan plan = *k.plan ? LayerPlan::parse(k.plan, c.num_hidden_layers)
                                 : LayerPlan::standard(c.num_hidden_layers);
  Model<double> m(c, plan, ops::make_backend<double>());
  m.init_weights(21);
  // Norm weights and biases away from their initial 1 / 0 so nothing is degenerate.
  auto r = testing::random_vec<double>(m.num_params(), 5, 0.3);
  for (const auto& t : m.layout().tensors())
    if (!t.is_matrix)
      for (int64_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] += r[t.offset + i];

  const int B = 2, T = 5;
  auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
  auto targets = testing::random_tokens(B * T, c.vocab_size, 2);
  targets[3] = ops::kIgnoreIndex;
  const double dloss = 1.0 / 9;
  // Every evaluation is the same pass (a shuffle's order depends on it).
  auto loss = [&] {
    m.restart_passes();
    return dloss * m.forward(tokens.data(), targets.data(), B, T).loss_sum;
  };

  m.zero_grad();
  m.restart_passes();
  m.forward(tokens.data(), targets.data(), B, T);
  m.backward(dloss);
  const std::vector<double> analytic(m.grads(), m.grads() + m.num_params());
  for (const auto& t : m.layout().tensors()) {
    testing::expect_gradient(loss, m.params() + t.offset, t.numel, analytic.data() + t.offset,
                             std::string(k.name) + " " + t.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ModelGrad,
    ::testing::Values(
        Case{"untied_mha", false, 4, false, 0}, Case{"tied_gqa", true, 2, false, 0},
        Case{"tied_mha", true, 4, false, 0}, Case{"untied_mqa_bias_hd6", false, 1, true, 6},
        Case{"skip_middle_bias", false, 2, true, 0, "standard,skip,standard", 3},
        Case{"ladder2", false, 2, false, 0, "ladder*2", 2},
        Case{"standard_ladder2_tied_bias", true, 2, true, 0, "standard,ladder*2", 3},
        Case{"ladder_standard_ladder", false, 4, false, 0, "ladder,standard,ladder", 3},
        Case{"parallel_bias", false, 2, true, 0, "parallel*2", 2},
        Case{"skip_ladder_parallel_ladder", true, 2, false, 0, "skip,ladder,parallel,ladder", 4},
        // Layer Parallelism: the mixed MLP norm's gradient split between the pair.
        Case{"lp2_alpha03_bias", false, 2, true, 0, "lp*2;lp_alpha=0.3", 2},
        Case{"standard_lp2_standard_tied", true, 4, false, 0, "standard,lp*2,standard", 4},
        Case{"lp2_ladder2", false, 2, false, 0, "lp*2,ladder*2", 4},
        // PAR groups of Layer Parallelism's study.
        Case{"par2_bias", false, 2, true, 0, "par*2", 2},
        Case{"standard_par3_tied", true, 2, false, 0, "standard,par*3;par_group=3", 4},
        // SPD: the virtual ranks' own MLP inputs, degree 2 and 4, with and without bias.
        Case{"spd2_bias", false, 2, true, 0, "spd*2;spd_degree=2", 2},
        Case{"standard_spd4_tied", true, 4, false, 0, "standard,spd*2;spd_degree=4", 3},
        Case{"ladder_spd4_bias", false, 4, true, 0, "ladder,spd*2;spd_degree=4", 3}),
    [](const auto& info) { return std::string(info.param.name); });

// Every kind of the table through its row's example plan (four layers): a new
// kind gets its gradient check from its row.
std::vector<Case> every_kind() {
  static std::deque<std::string> names;  // (stable as it grows)
  std::vector<Case> cases;
  for (const KindInfo* k : kind_table()) {
    names.push_back(std::string("kind_") + k->name);
    cases.push_back(Case{names.back().c_str(), false, 2, true, 0, k->example, 4});
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Kinds, ModelGrad, ::testing::ValuesIn(every_kind()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
