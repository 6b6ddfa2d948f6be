// The Llama model: forward/backward consistency, float against double, the
// loss against logits computed by hand, causality, batch independence,
// determinism, and a few AdamW steps driving the loss down.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/threads.h"
#include "golden_standard.h"
#include "infer/generate.h"
#include "model/model.h"
#include "model_surgery.h"
#include "testing.h"
#include "train/optimizer.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::random_tokens;

LlamaConfig tiny_config(bool tied, int kv_heads, bool bias = false, int head_dim = 0) {
  LlamaConfig c;
  c.vocab_size = 29;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  c.initializer_range = 0.3;  // large enough that every path matters
  c.finalize();
  return c;
}

template <typename T>
std::unique_ptr<Model<T>> make_model(const LlamaConfig& c, uint64_t seed = 5) {
  auto m = std::make_unique<Model<T>>(c, ops::make_backend<T>());
  m->init_weights(seed);
  if (c.attention_bias) {  // biases start at zero; give them values so they are exercised
    auto r = testing::random_vec<T>(m->num_params(), 77, 0.2);
    for (const auto& t : m->layout().tensors())
      if (t.name.find("bias") != std::string::npos)
        for (int64_t i = 0; i < t.numel; ++i) m->params()[t.offset + i] = r[t.offset + i];
  }
  return m;
}

struct Batch {
  int B, T;
  std::vector<int32_t> tokens, targets;
};

Batch make_batch(int B, int T, int V, uint32_t stream) {
  Batch b{B, T, random_tokens(int64_t(B) * T, V, stream),
          random_tokens(int64_t(B) * T, V, stream + 1)};
  b.targets[1] = ops::kIgnoreIndex;
  return b;
}

template <typename T>
std::vector<T> grads_of(Model<T>& m) {
  return std::vector<T>(m.grads(), m.grads() + m.num_params());
}

// The standard plan gives bitwise the losses and gradients of the golden
// reference (the pre-v2 executor written out, tests/golden_standard.h), with
// the fused and the separate head, tied and untied, MHA and GQA, with biases.
TEST(Model, StandardPlanEqualsGoldenReferenceBitwise) {
  struct Case {
    bool tied;
    int kv;
    bool bias;
  };
  for (const Case& k : {Case{false, 4, true}, Case{true, 2, false}, Case{false, 1, true}})
    for (bool fused : {true, false}) {
      SCOPED_TRACE(cat("tied ", k.tied, " kv ", k.kv, " bias ", k.bias, " fused ", fused));
      LlamaConfig c = tiny_config(k.tied, k.kv, k.bias);
      c.num_hidden_layers = 3;
      auto m = make_model<float>(c);
      const Batch b = make_batch(3, 9, c.vocab_size, 31);
      const double dloss = 1.0 / 26;
      const auto want = testing::golden_standard(*m, b.tokens.data(), b.targets.data(), b.B, b.T,
                                                 dloss, fused, nullptr);
      m->zero_grad();
      LossResult got;
      if (fused) {
        got = m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, dloss);
      } else {
        got = m->forward(b.tokens.data(), b.targets.data(), b.B, b.T);
        m->backward(dloss);
      }
      EXPECT_EQ(got.n_valid, want.n_valid);
      EXPECT_EQ(std::memcmp(&got.loss_sum, &want.loss_sum, sizeof(double)), 0)
          << got.loss_sum << " vs " << want.loss_sum;
      ASSERT_EQ(size_t(m->num_params()), want.grads.size());
      for (const auto& t : m->layout().tensors())
        EXPECT_EQ(std::memcmp(m->grads() + t.offset, want.grads.data() + t.offset,
                              sizeof(float) * size_t(t.numel)),
                  0)
            << t.name << " differs from the golden reference";
    }
}

// A skipped layer is the model without that layer, bitwise: loss and every
// gradient in training (the skipped layer's gradients stay zero), logits in
// evaluation, tokens in generation (plain, early exit, self-speculative).
TEST(Model, SkippedLayerEqualsRemovedLayerBitwise) {
  LlamaConfig c = tiny_config(false, 2, true);
  c.num_hidden_layers = 4;
  auto m = make_model<float>(c);
  m->set_plan(LayerPlan::parse("standard,skip,standard*2", 4));
  auto r = testing::without_layer(*m, 1);
  const Batch b = make_batch(2, 9, c.vocab_size, 41);
  m->zero_grad();
  r->zero_grad();
  const LossResult lm = m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 0.1);
  const LossResult lr = r->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 0.1);
  EXPECT_EQ(std::memcmp(&lm.loss_sum, &lr.loss_sum, sizeof(double)), 0);
  size_t compared = 0;
  for (size_t t = 0; t < m->layout().tensors().size(); ++t) {
    const ParamInfo& p = m->layout()[int(t)];
    const float* g = m->grad(int(t));
    if (p.layer == 1) {
      for (int64_t i = 0; i < p.numel; ++i) ASSERT_EQ(g[i], 0.0f) << p.name;
      continue;
    }
    for (size_t u = 0; u < r->layout().tensors().size(); ++u)
      if (r->layout()[int(u)].name == testing::layer_renamed(p.name, 1)) {
        EXPECT_EQ(std::memcmp(g, r->grad(int(u)), sizeof(float) * size_t(p.numel)), 0) << p.name;
        ++compared;
      }
  }
  EXPECT_EQ(compared, r->layout().tensors().size());
  std::vector<float> a(size_t(b.B) * b.T * c.vocab_size), z(a.size());
  m->forward_logits(b.tokens.data(), b.B, b.T, a.data());
  r->forward_logits(b.tokens.data(), b.B, b.T, z.data());
  EXPECT_EQ(std::memcmp(a.data(), z.data(), a.size() * sizeof(float)), 0) << "logits";
  GenerateOptions g;
  g.max_new_tokens = 12;
  const std::vector<int32_t> prompt = {1, 5, 7, 2};
  EXPECT_EQ(generate(*m, prompt, g), generate(*r, prompt, g));
  g.exit_layer = 2;  // after the skip: layers [0, 2) of m are layer 0 of r
  GenerateOptions h = g;
  h.exit_layer = 1;
  EXPECT_EQ(generate(*m, prompt, g), generate(*r, prompt, h));
  g.exit_layer = 3;
  g.speculations = 3;
  GenerateOptions full;
  full.max_new_tokens = 12;
  EXPECT_EQ(generate(*m, prompt, g), generate(*r, prompt, full));
}

TEST(Model, ForwardBackwardEqualsForwardThenBackward) {
  for (bool tied : {false, true}) {
    auto m = make_model<float>(tiny_config(tied, 2));
    const Batch b = make_batch(3, 7, 29, 1);
    m->zero_grad();
    const LossResult r1 = m->forward(b.tokens.data(), b.targets.data(), b.B, b.T);
    m->backward(1.0 / r1.n_valid);
    const auto g1 = grads_of(*m);
    m->zero_grad();
    const LossResult r2 =
        m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0 / r1.n_valid);
    EXPECT_EQ(r1.n_valid, 3 * 7 - 1);
    EXPECT_EQ(r1.n_valid, r2.n_valid);
    EXPECT_NEAR(r1.loss_sum, r2.loss_sum, 1e-6 * r1.loss_sum);
    expect_close(grads_of(*m), g1, 1e-5, 0, "fused vs separate gradients");
  }
}

TEST(Model, FloatMatchesDouble) {
  const LlamaConfig c = tiny_config(false, 2, true, 6);
  auto mf = make_model<float>(c);
  auto md = make_model<double>(c);
  for (int64_t i = 0; i < md->num_params(); ++i) md->params()[i] = double(mf->params()[i]);
  const Batch b = make_batch(2, 9, 29, 3);
  mf->zero_grad();
  md->zero_grad();
  const auto rf = mf->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 0.1);
  const auto rd = md->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 0.1);
  EXPECT_NEAR(rf.loss_sum, rd.loss_sum, 1e-5 * rd.loss_sum);
  expect_close(grads_of(*mf), grads_of(*md), 1e-4, 0, "float vs double gradients");
}

TEST(Model, LossEqualsCrossEntropyOfLogits) {
  const LlamaConfig c = tiny_config(true, 4);
  auto m = make_model<double>(c);
  const Batch b = make_batch(2, 6, c.vocab_size, 5);
  const LossResult r = m->forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  std::vector<double> logits(size_t(b.B) * b.T * c.vocab_size);
  m->forward_logits(b.tokens.data(), b.B, b.T, logits.data());
  double want = 0;
  int64_t n = 0;
  for (int64_t t = 0; t < int64_t(b.B) * b.T; ++t) {
    if (b.targets[t] == ops::kIgnoreIndex) continue;
    const double* l = logits.data() + t * c.vocab_size;
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < c.vocab_size; ++v) mx = std::max(mx, l[v]);
    for (int v = 0; v < c.vocab_size; ++v) z += std::exp(l[v] - mx);
    want += mx + std::log(z) - l[b.targets[t]];
    ++n;
  }
  EXPECT_EQ(r.n_valid, n);
  EXPECT_NEAR(r.loss_sum, want, 1e-10 * want);
}

TEST(Model, StreamsAndHiddenStates) {
  const LlamaConfig c = tiny_config(false, 2);
  auto m = make_model<float>(c);
  const Batch b = make_batch(1, 5, c.vocab_size, 7);
  m->forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  // x_0 is the embedding of the tokens; hidden_state(l) is x_{2(l+1)}.
  const float* x0 = m->stream(0);
  const float* wte = m->param(m->layout().embed);
  for (int t = 0; t < b.T; ++t)
    for (int ch = 0; ch < c.hidden_size; ++ch)
      ASSERT_EQ(x0[t * c.hidden_size + ch], wte[b.tokens[t] * c.hidden_size + ch]);
  EXPECT_EQ(m->hidden_state(c.num_hidden_layers - 1), m->stream(2 * c.num_hidden_layers));
  EXPECT_THROW(m->stream(2 * c.num_hidden_layers + 1), Error);
}

TEST(Model, CausalAndBatchIndependent) {
  const LlamaConfig c = tiny_config(false, 2);
  auto m = make_model<double>(c);
  const int T = 8, V = c.vocab_size;
  Batch b = make_batch(2, T, V, 9);
  std::vector<double> full(size_t(2) * T * V), changed(full.size()), alone(size_t(T) * V);
  m->forward_logits(b.tokens.data(), 2, T, full.data());
  // Changing token 5 of sample 0 leaves positions 0..4 of sample 0 and all of sample 1 alone.
  Batch b2 = b;
  b2.tokens[5] = (b2.tokens[5] + 1) % V;
  m->forward_logits(b2.tokens.data(), 2, T, changed.data());
  for (int t = 0; t < 2 * T; ++t) {
    double diff = 0;
    for (int v = 0; v < V; ++v)
      diff = std::max(diff, std::fabs(full[t * V + v] - changed[t * V + v]));
    if (t < 5 || t >= T) {
      EXPECT_EQ(diff, 0.0) << "position " << t;
    } else if (t == 5) {
      EXPECT_GT(diff, 1e-6) << "position " << t;
    }
  }
  // Sample 1 run alone gives the same logits as inside the batch.
  m->forward_logits(b.tokens.data() + T, 1, T, alone.data());
  expect_close(alone.data(), full.data() + T * V, T * V, 1e-12, 0, "sample alone vs in batch");
}

TEST(Model, DeterministicAndThreadCountIndependentInit) {
  const LlamaConfig c = tiny_config(false, 2);
  const int saved = num_threads();
  set_num_threads(1);
  auto a = make_model<float>(c, 11);
  set_num_threads(saved);
  auto b = make_model<float>(c, 11);
  for (int64_t i = 0; i < a->num_params(); ++i) ASSERT_EQ(a->params()[i], b->params()[i]);
  auto other = make_model<float>(c, 12);
  EXPECT_NE(a->params()[100], other->params()[100]);
  // Same inputs, same thread count: bit-identical loss and gradients.
  const Batch batch = make_batch(2, 7, c.vocab_size, 13);
  std::vector<float> g[2];
  double loss[2];
  for (int run = 0; run < 2; ++run) {
    b->zero_grad();
    loss[run] = b->forward_backward(batch.tokens.data(), batch.targets.data(), 2, 7, 0.05).loss_sum;
    g[run] = grads_of(*b);
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(g[0], g[1]);
}

TEST(Model, InitialLossIsNearUniform) {
  LlamaConfig c = tiny_config(false, 2);
  c.initializer_range = 0.02;
  c.vocab_size = 97;
  auto m = make_model<float>(c);
  const Batch b = make_batch(4, 16, c.vocab_size, 15);
  const LossResult r = m->forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  EXPECT_NEAR(r.mean(), std::log(97.0), 0.05);
}

TEST(Model, RejectsBadShapesAndTokens) {
  auto m = make_model<float>(tiny_config(false, 2));
  std::vector<int32_t> tokens(64, 1), targets(64, 1);
  EXPECT_THROW(m->forward(tokens.data(), targets.data(), 1, 33), Error);  // > max positions
  EXPECT_THROW(m->forward(tokens.data(), targets.data(), 0, 4), Error);
  tokens[3] = 29;  // == vocab_size
  EXPECT_THROW(m->forward(tokens.data(), targets.data(), 1, 8), Error);
  EXPECT_THROW(m->backward(1.0), Error) << "backward before a successful forward";
}

TEST(Model, Bf16MatmulsTrackFp32AndStillLearn) {
  LlamaConfig c = tiny_config(false, 2);
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.initializer_range = 0.1;
  auto m = make_model<float>(c);
  const Batch b = make_batch(4, 16, c.vocab_size, 19);
  const int64_t n = int64_t(b.B) * b.T - 1;
  m->zero_grad();
  const double l32 =
      m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0 / n).mean();
  const auto g32 = grads_of(*m);
  m->backend().set_matmul_precision(ops::MatmulPrecision::BF16);
  m->zero_grad();
  const double l16 =
      m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0 / n).mean();
  const auto g16 = grads_of(*m);
  EXPECT_NEAR(l16, l32, 1e-2 * l32);
  EXPECT_NE(l16, l32) << "bf16 path did not run";
  double dot = 0, n32 = 0, n16 = 0;  // gradients point the same way
  for (size_t i = 0; i < g32.size(); ++i) {
    dot += double(g32[i]) * g16[i];
    n32 += double(g32[i]) * g32[i];
    n16 += double(g16[i]) * g16[i];
  }
  EXPECT_GT(dot / std::sqrt(n32 * n16), 0.99);
  AdamWConfig oc;
  oc.lr = 1e-2;
  AdamW<float> opt(m->backend(), m->layout(), oc);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    m->zero_grad();
    last = m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0 / n).mean();
    if (step == 0) first = last;
    opt.step(m->params(), m->grads(), oc.lr);
  }
  m->backend().set_matmul_precision(ops::MatmulPrecision::FP32);
  EXPECT_LT(last, 0.5 * first);
}

TEST(Model, AdamWStepsDriveLossDown) {
  LlamaConfig c = tiny_config(false, 2);
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.initializer_range = 0.02;
  auto m = make_model<float>(c);
  AdamWConfig oc;
  oc.lr = 1e-2;
  oc.weight_decay = 0.01;
  oc.grad_clip = 1.0;
  AdamW<float> opt(m->backend(), m->layout(), oc);
  const Batch b = make_batch(4, 16, c.vocab_size, 17);
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    m->zero_grad();
    const int64_t n_valid = int64_t(b.B) * b.T - 1;
    const LossResult r =
        m->forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0 / double(n_valid));
    losses.push_back(r.mean());
    const double norm = opt.step(m->params(), m->grads(), oc.lr);
    EXPECT_TRUE(std::isfinite(norm));
  }
  EXPECT_EQ(opt.steps_taken(), 30);
  EXPECT_NEAR(losses.front(), std::log(64.0), 0.1);
  EXPECT_LT(losses.back(), 0.5 * losses.front())
      << "loss did not fall: " << losses.front() << " -> " << losses.back();
}

}  // namespace
}  // namespace strata
