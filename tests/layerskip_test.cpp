// LayerSkip: the schedules against the spec's test vectors, the model's
// gathered layer dropout against the dense masked computation, a gradient
// check with dropout and several exits, and the trainer with [layerskip].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/model.h"
#include "testing.h"
#include "train/layerskip.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace strata {
namespace {

// ------------------------------------------------------------ schedules

TEST(LayerSkipSchedule, DropRatesL32) {
  // Spec A.2.4: L = 32, p_max = 0.1, S = 1.
  const double want[32] = {0.0,     0.00226, 0.00457, 0.00694, 0.00936, 0.01183, 0.01436, 0.01694,
                           0.01959, 0.02229, 0.02506, 0.02788, 0.03078, 0.03373, 0.03676, 0.03985,
                           0.04301, 0.04624, 0.04955, 0.05293, 0.05639, 0.05993, 0.06354, 0.06724,
                           0.07102, 0.07489, 0.07884, 0.08289, 0.08702, 0.09125, 0.09558, 0.1};
  LayerSkipConfig c;
  c.p_max = 0.1;
  const auto p = layerskip_drop_rates(c, 32, 123, 1000);
  for (int l = 0; l < 32; ++l) EXPECT_NEAR(p[size_t(l)], want[l], 5e-6) << "layer " << l;
  // Mean of 0.2 D(l): 0.08891 (L=32), 0.08904 (L=24), 0.08883 (L=40).
  for (auto [L, mean] : {std::pair{32, 0.08891}, {24, 0.08904}, {40, 0.08883}}) {
    double s = 0;
    for (int l = 0; l < L; ++l) s += 0.2 * layerskip_layer_scale("exp", l, L);
    EXPECT_NEAR(s / L, mean, 5e-6) << "L " << L;
  }
  EXPECT_DOUBLE_EQ(layerskip_layer_scale("linear", 8, 17), 0.5);
  EXPECT_DOUBLE_EQ(layerskip_layer_scale("const", 0, 17), 1.0);
}

TEST(LayerSkipSchedule, TimeScale) {
  // S_exp with T = 50,000.
  EXPECT_NEAR(layerskip_time_scale("exp", 0, 50000), 0.0, 1e-12);
  EXPECT_NEAR(layerskip_time_scale("exp", 12500, 50000), 0.18921, 5e-6);
  EXPECT_NEAR(layerskip_time_scale("exp", 25000, 50000), 0.41422, 5e-6);
  EXPECT_NEAR(layerskip_time_scale("exp", 37500, 50000), 0.68181, 5e-6);
  EXPECT_NEAR(layerskip_time_scale("exp", 49999, 50000), 1.0, 1e-12);
  EXPECT_EQ(layerskip_time_scale("exp", 0, 1), 1.0);  // T = 1: S = 1
  EXPECT_EQ(layerskip_time_scale("none", 7, 100), 1.0);
  LayerSkipConfig c;
  c.p_max = 0.2;
  c.time_scale = "exp";
  EXPECT_NEAR(layerskip_drop_rates(c, 4, 25000, 50000)[3], 0.2 * 0.41422, 5e-6);
}

TEST(LayerSkipSchedule, ExitScaleTable) {
  // Spec A.3.3: every layer enabled.
  struct Row {
    int L;
    double e_scale, last, sum, w_last;
  };
  for (const Row& r : {Row{32, 0.2, 124.0, 1116.0, 0.1111}, Row{32, 0.1, 77.5, 573.5, 0.1351},
                       Row{40, 0.1, 113.1, 1101.1, 0.1027}, Row{24, 0.2, 73.6, 478.4, 0.1538},
                       Row{24, 1.0, 276.0, 2300.0, 0.12}}) {
    LayerSkipConfig c;
    c.e_scale = r.e_scale;
    const std::vector<bool> on(size_t(r.L), true);
    const auto e = layerskip_exit_scales(c, on);
    double sum = 0;
    for (double x : e) sum += x;
    EXPECT_NEAR(e.back(), r.last, 0.051) << "L " << r.L;
    EXPECT_NEAR(sum, r.sum, 0.051) << "L " << r.L;
    const auto w = layerskip_exit_weights(c, r.L, 0, 100);
    EXPECT_NEAR(w.back(), r.w_last, 5e-5) << "L " << r.L;
    double ws = 0;
    for (double x : w) ws += x;
    EXPECT_NEAR(ws, 1.0, 1e-12);
    EXPECT_EQ(w[0], 0.0);  // the printed formula: e(0) = 0
  }
}

void expect_weights(const LayerSkipConfig& c, int L, int64_t t,
                    const std::vector<std::pair<int, double>>& want) {
  const auto w = layerskip_exit_weights(c, L, t, 1000);
  std::vector<double> full(size_t(L), 0.0);
  for (auto [l, v] : want) full[size_t(l)] = v;
  for (int l = 0; l < L; ++l)
    EXPECT_NEAR(w[size_t(l)], full[size_t(l)], 5e-6) << "L " << L << " t " << t << " layer " << l;
}

TEST(LayerSkipSchedule, RotationalWeights) {
  LayerSkipConfig c;
  c.e_scale = 0.2;
  c.curriculum = "rotational";
  c.rotation = 8;
  expect_weights(c, 32, 0, {{0, 0.0}, {8, 0.03297}, {16, 0.12454}, {24, 0.27473}, {31, 0.56777}});
  expect_weights(c, 32, 1,
                 {{1, 0.00087}, {9, 0.03934}, {17, 0.13374}, {25, 0.28409}, {31, 0.54196}});
  c.rotation = 23;
  expect_weights(c, 24, 1, {{1, 0.00271}, {23, 0.99729}});
  expect_weights(c, 24, 5, {{5, 0.03916}, {23, 0.96084}});
  // Without always_last, the last layer follows the rotation too.
  c.always_last = false;
  c.rotation = 8;
  const auto on = layerskip_curriculum(c, 32, 0, 1000);
  EXPECT_FALSE(on[31]);
  EXPECT_TRUE(layerskip_curriculum(c, 32, 7, 1000)[31]);  // 31 mod 8 = 7
}

TEST(LayerSkipSchedule, GradualCurriculum) {
  LayerSkipConfig c;
  c.e_scale = 1.0;
  c.curriculum = "gradual";
  // TOPv2: T = 5800, L = 24: a new layer every 120.8 steps; layer 0 at ~2779.
  const int L = 24;
  const int64_t T = 5800;
  auto count = [&](int64_t t) {
    const auto on = layerskip_curriculum(c, L, t, T);
    return int(std::count(on.begin(), on.end(), true));
  };
  EXPECT_EQ(count(0), 1);
  EXPECT_EQ(count(120), 1);
  EXPECT_EQ(count(121), 2);
  EXPECT_FALSE(layerskip_curriculum(c, L, 2779, T)[0]);  // 23 * 5800 / 48 = 2779.2
  EXPECT_TRUE(layerskip_curriculum(c, L, 2780, T)[0]);
  EXPECT_EQ(count(2780), 24);
  EXPECT_EQ(count(T - 1), 24);
}

TEST(LayerSkipSchedule, CumulativeFormulaWeighsEveryEnabledExit) {
  LayerSkipConfig c;
  c.e_scale = 1.0;
  c.e_formula = "cumulative";
  c.curriculum = "rotational";
  c.rotation = 5;
  // L = 6, t = 0: exits {0, 5}: e(0) = 1, e(5) = 1 + 6 = 7.
  expect_weights(c, 6, 0, {{0, 1.0 / 8}, {5, 7.0 / 8}});
  // t = 4: exits {4, 5}: e(4) = 5, e(5) = 5 + 6 = 11.
  expect_weights(c, 6, 4, {{4, 5.0 / 16}, {5, 11.0 / 16}});
}

TEST(LayerSkipSchedule, NoEarlyExitMeansLastLayerOnly) {
  LayerSkipConfig c;
  c.p_max = 0.3;  // dropout only
  expect_weights(c, 5, 3, {{4, 1.0}});
  // The printed formula with only layer 0 enabled and no last layer: weight
  // falls back to the last layer rather than vanishing.
  c.e_scale = 0.5;
  c.curriculum = "rotational";
  c.rotation = 5;
  c.always_last = false;
  expect_weights(c, 5, 0, {{4, 1.0}});
}

TEST(LayerSkipSchedule, MasksAreDeterministicPerLayerAndSample) {
  LayerSkipConfig c;
  c.p_max = 0.5;
  c.layer_scale = "const";
  const auto a = layerskip_keep_masks(c, 4, 10, 100, 7, 0, 64);
  EXPECT_EQ(a, layerskip_keep_masks(c, 4, 10, 100, 7, 0, 64));   // same key, same masks
  EXPECT_NE(a, layerskip_keep_masks(c, 4, 11, 100, 7, 0, 64));   // next step
  EXPECT_NE(a, layerskip_keep_masks(c, 4, 10, 100, 7, 64, 64));  // the next 64 samples
  EXPECT_NE(a[0], a[1]);                                         // layers differ
  // Rate: about half dropped over 4 x 64 draws.
  int kept = 0;
  for (const auto& l : a)
    for (uint8_t k : l) kept += k;
  EXPECT_GT(kept, 96);
  EXPECT_LT(kept, 160);
  // Keyed by global sample index: any slice of the samples draws the masks
  // those samples have in the whole batch (a dp rank's share, a micro-batch).
  const auto slice = layerskip_keep_masks(c, 4, 10, 100, 7, 16, 8);
  for (int l = 0; l < 4; ++l)
    EXPECT_TRUE(
        std::equal(slice[size_t(l)].begin(), slice[size_t(l)].end(), a[size_t(l)].begin() + 16));
  // p = 0 at layer 0 under the exponential scale: never dropped.
  c.layer_scale = "exp";
  const auto first = layerskip_keep_masks(c, 4, 10, 100, 7, 0, 64);
  for (uint8_t k : first[0]) EXPECT_EQ(k, 1);
}

TEST(LayerSkipSchedule, ValidateNamesTheKey) {
  LayerSkipConfig c;
  c.curriculum = "rotational";
  EXPECT_ERROR(c.validate(6, "r.toml"), "layerskip.rotation");
  c.rotation = 2;
  c.layer_scale = "cubic";
  EXPECT_ERROR(c.validate(6, "r.toml"), "r.toml: layerskip.layer_scale");
  c.layer_scale = "exp";
  c.p_max = 1.5;
  EXPECT_ERROR(c.validate(6, "r.toml"), "layerskip.p_max");
}

// ------------------------------------------------------------ the model

LlamaConfig tiny(int layers) {
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = false;
  c.initializer_range = 0.4;
  c.finalize();
  return c;
}

template <typename T>
void perturb_vectors(Model<T>& m) {
  auto r = testing::random_vec<T>(m.num_params(), 5, 0.3);
  for (const auto& t : m.layout().tensors())
    if (!t.is_matrix)
      for (int64_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] += r[t.offset + i];
}

// Masks covering every case: a layer keeping all samples, one keeping none,
// and partial ones.
// (B = 4; L = 2, 3 or 4.)
LayerSkipStep mixed_step(int L, int B) {
  LayerSkipStep s;
  s.keep.assign(size_t(L), std::vector<uint8_t>(size_t(B), 1));
  if (L == 2) {
    s.keep = {{1, 0, 1, 1}, {0, 1, 1, 0}};
    s.exit_weight = {0.4, 0.6};
    return s;
  }
  s.keep[0] = {1, 0, 1, 1};
  s.keep[1] = {0, 0, 0, 0};
  s.keep[2] = {0, 1, 1, 0};
  // layer 3 keeps all
  s.exit_weight = {0.1, 0.0, 0.3, 0.6};
  s.exit_weight.resize(size_t(L));
  if (L == 3) s.exit_weight = {0.1, 0.0, 0.9};
  return s;
}

// Plans whose layers defer reductions and input gradients across units
// (ladder), share a norm (parallel), run SPD blocks or mix kinds, under the
// same masks.
const char* const kPlans4[] = {"standard*4",         "ladder*4",
                               "standard,ladder*3",  "ladder,standard,ladder,parallel",
                               "spd,standard,spd*2", "ladder,spd*3;spd_degree=2"};

void gathered_equals_dense(const LayerPlan& plan) {
  const LlamaConfig c = tiny(4);
  const int B = 4, T = 6;
  auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
  auto targets = testing::random_tokens(B * T, c.vocab_size, 2);
  targets[5] = ops::kIgnoreIndex;
  auto run = [&](bool dense, std::vector<double>* grads, LossResult* res,
                 std::vector<std::vector<double>>* hidden) {
    Model<double> m(c, plan, ops::make_backend<double>());
    m.init_weights(3);
    perturb_vectors(m);
    LayerSkipStep s = mixed_step(4, B);
    s.dense_reference = dense;
    m.zero_grad();
    *res = m.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &s);
    grads->assign(m.grads(), m.grads() + m.num_params());
    for (int l = 0; l < 4; ++l) {
      const double* h = m.hidden_state(l);
      hidden->emplace_back(h, h + B * T * c.hidden_size);
    }
  };
  std::vector<double> g_gather, g_dense;
  LossResult r_gather, r_dense;
  std::vector<std::vector<double>> h_gather, h_dense;
  run(false, &g_gather, &r_gather, &h_gather);
  run(true, &g_dense, &r_dense, &h_dense);
  EXPECT_NEAR(r_gather.objective, r_dense.objective, 1e-12);
  EXPECT_NEAR(r_gather.loss_sum, r_dense.loss_sum, 1e-12);
  for (int l = 0; l < 4; ++l) {
    if (l == 1) {
      EXPECT_TRUE(std::isnan(r_gather.exit_loss_sum[size_t(l)]));  // weight 0: not computed
      continue;
    }
    EXPECT_NEAR(r_gather.exit_loss_sum[size_t(l)], r_dense.exit_loss_sum[size_t(l)], 1e-12);
  }
  for (int l = 0; l < 4; ++l)
    for (size_t i = 0; i < h_gather[size_t(l)].size(); ++i)
      ASSERT_NEAR(h_gather[size_t(l)][i], h_dense[size_t(l)][i], 1e-12) << "layer " << l;
  for (size_t i = 0; i < g_gather.size(); ++i) ASSERT_NEAR(g_gather[i], g_dense[i], 1e-12) << i;
  // Layer 1 dropped every sample: its weights got no gradient; layer 1's output
  // equals its input.
  Model<double> probe(c, ops::make_backend<double>());
  const auto& P = probe.layout().layers[1];
  for (int t = P.input_norm; t <= P.down; ++t) {
    const auto& info = probe.layout()[t];
    for (int64_t i = 0; i < info.numel; ++i) ASSERT_EQ(g_gather[size_t(info.offset + i)], 0.0);
  }
  EXPECT_EQ(h_gather[1], h_gather[0]);
}

TEST(LayerSkipModel, GatheredEqualsDenseMasked) {
  for (const char* text : kPlans4) {
    SCOPED_TRACE(text);
    gathered_equals_dense(LayerPlan::parse(text, 4));
  }
}

TEST(LayerSkipModel, DroppedSamplesPassUnchanged) {
  const LlamaConfig c = tiny(4);
  const int B = 4, T = 6;
  auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
  auto targets = testing::random_tokens(B * T, c.vocab_size, 2);
  Model<double> m(c, ops::make_backend<double>());
  m.init_weights(3);
  LayerSkipStep s = mixed_step(4, B);
  m.zero_grad();
  m.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &s);
  const int64_t S = int64_t(T) * c.hidden_size;
  // Layer 2 drops samples 0 and 3: their output equals layer 1's output (= layer 0's).
  for (int b : {0, 3})
    for (int64_t i = 0; i < S; ++i)
      ASSERT_EQ(m.hidden_state(2)[b * S + i], m.hidden_state(1)[b * S + i]);
  // ... and the kept ones changed.
  EXPECT_NE(m.hidden_state(2)[1 * S], m.hidden_state(1)[1 * S]);
  // Without a LayerSkipStep: the ordinary loss, exactly.
  Model<double> plain(c, ops::make_backend<double>());
  plain.init_weights(3);
  plain.zero_grad();
  const LossResult a = plain.forward_backward(tokens.data(), targets.data(), B, T, 0.1);
  LayerSkipStep none;  // empty masks and weights
  Model<double> same(c, ops::make_backend<double>());
  same.init_weights(3);
  same.zero_grad();
  const LossResult b = same.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &none);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(a.objective, a.loss_sum);
  for (int64_t i = 0; i < plain.num_params(); ++i) ASSERT_EQ(plain.grads()[i], same.grads()[i]);
}

void gradient_check_with_dropout(const char* text, int L) {
  SCOPED_TRACE(text);
  const LlamaConfig c = tiny(L);
  const int B = 4, T = 5;
  auto tokens = testing::random_tokens(B * T, c.vocab_size, 4);
  auto targets = testing::random_tokens(B * T, c.vocab_size, 5);
  targets[2] = ops::kIgnoreIndex;
  Model<double> m(c, LayerPlan::parse(text, L), ops::make_backend<double>());
  m.init_weights(8);
  perturb_vectors(m);
  const LayerSkipStep s = mixed_step(L, B);
  const double dloss = 1.0 / 19;
  m.zero_grad();
  m.forward_backward(tokens.data(), targets.data(), B, T, dloss, &s);
  const std::vector<double> analytic(m.grads(), m.grads() + m.num_params());
  auto objective = [&] {
    return dloss * m.forward_backward(tokens.data(), targets.data(), B, T, dloss, &s).objective;
  };
  for (const auto& t : m.layout().tensors())
    testing::expect_gradient(objective, m.params() + t.offset, t.numel, analytic.data() + t.offset,
                             t.name);
}

TEST(LayerSkipModel, GradientCheckWithDropoutAndExits) {
  gradient_check_with_dropout("standard*4", 4);
}

// Ladder, hybrid and SPD plans: deferred residuals and input gradients around
// dropped samples and units, with exits at unit boundaries.
TEST(LayerSkipModel, GradientCheckLadderWithDropoutAndExits) {
  gradient_check_with_dropout("ladder*2", 2);
  gradient_check_with_dropout("standard,ladder*2", 3);
  gradient_check_with_dropout("ladder,standard,ladder", 3);
  gradient_check_with_dropout("ladder,parallel,skip,ladder", 4);
  gradient_check_with_dropout("ladder,spd*2", 3);
}

TEST(LayerSkipModel, FloatGatheredMatchesDouble) {
  // The float path (the one training uses) against double, gathered both.
  const LlamaConfig c = tiny(4);
  const int B = 4, T = 6;
  auto tokens = testing::random_tokens(B * T, c.vocab_size, 1);
  auto targets = testing::random_tokens(B * T, c.vocab_size, 2);
  Model<double> md(c, ops::make_backend<double>());
  Model<float> mf(c, ops::make_backend<float>());
  md.init_weights(3);
  mf.init_weights(3);
  const LayerSkipStep s = mixed_step(4, B);
  md.zero_grad();
  mf.zero_grad();
  const double od = md.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &s).objective;
  const double of = mf.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &s).objective;
  EXPECT_NEAR(of, od, 1e-4 * std::abs(od));
  for (int64_t i = 0; i < md.num_params(); ++i)
    ASSERT_NEAR(mf.grads()[i], md.grads()[i], 1e-4 + 1e-3 * std::abs(md.grads()[i])) << i;
}

// ------------------------------------------------------------ the trainer

std::string tmpdir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("strata_layerskip_" + name);
  std::filesystem::remove_all(d);
  return d.string();
}

Recipe debug_recipe(const std::string& dir, std::vector<std::string> sets) {
  const std::string src = STRATA_SOURCE_DIR;
  // The test's own settings come last: they override these. The CPU on
  // every host.
  sets.insert(
      sets.begin(),
      {"run.device=\"cpu\"", "run.dir=\"" + dir + "\"", "data.dataset=\"" + dir + "-data\"",
       "data.tokenizer=\"" + src + "/data/tokenizers/tok512.model\"",
       "data.inputs=[\"" + src + "/data/corpora/tinyshakespeare/input.txt\"]",
       "log.sample_prompt=\"\"", "log.interval=1", "training.steps=12",
       "training.micro_batch_size=4", "training.grad_accum_steps=2", "layerskip.p_max=0.5",
       "layerskip.e_scale=1.0", "layerskip.curriculum=\"rotational\"", "layerskip.rotation=1",
       "layerskip.e_formula=\"cumulative\"", "checkpoint.interval=6", "checkpoint.keep=0"});
  return Recipe::load(src + "/recipes/debug.toml", sets, train_recipe_schema());
}

TEST(LayerSkipTrain, ResumeIsBitExactWithDropout) {
  const std::string a = tmpdir("straight"), b = tmpdir("resumed");
  const TrainResult full = train(debug_recipe(a, {}));
  ASSERT_EQ(full.losses.size(), 12u);
  // Stop after 6 steps (the checkpoint at 6), then resume to 12.
  train(debug_recipe(b, {"training.steps=6", "lr_scheduler.decay_steps=12"}));
  const TrainResult rest = train(debug_recipe(b, {"lr_scheduler.decay_steps=12"}));
  ASSERT_EQ(rest.losses.size(), 6u);
  // Same masks and weights after resume: identical losses... except that the
  // first run's schedule used training.steps = 12 for S(t) and the curriculum,
  // which the resumed run has too (training.steps = 12 on resume).
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(rest.losses[i], full.losses[6 + i]) << "step " << 7 + i;
}

// A ladder model trains with layer dropout and exits: resumes bit-exactly,
// and computes something else than the standard plan on the same masks.
TEST(LayerSkipTrain, LadderPlanWithDropout) {
  const std::string a = tmpdir("ladder"), b = tmpdir("ladder_resumed"), s = tmpdir("standard");
  const std::string plan = "model.plan=\"ladder*2\"";
  const TrainResult full = train(debug_recipe(a, {plan}));
  ASSERT_EQ(full.losses.size(), 12u);
  train(debug_recipe(b, {plan, "training.steps=6", "lr_scheduler.decay_steps=12"}));
  const TrainResult rest = train(debug_recipe(b, {plan, "lr_scheduler.decay_steps=12"}));
  ASSERT_EQ(rest.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(rest.losses[i], full.losses[6 + i]) << "step " << 7 + i;
  const TrainResult standard = train(debug_recipe(s, {}));
  EXPECT_NE(full.losses[3], standard.losses[3]);
  EXPECT_LT(full.losses.back(), full.losses.front());
}

TEST(LayerSkipTrain, DropoutChangesTrainingAndExitsAreLogged) {
  const std::string a = tmpdir("on"), b = tmpdir("off");
  const TrainResult on = train(debug_recipe(a, {}));
  const TrainResult off = train(debug_recipe(b, {"layerskip.p_max=0.0", "layerskip.e_scale=0.0"}));
  EXPECT_NE(on.losses[3], off.losses[3]);
  EXPECT_TRUE(std::isfinite(on.last_loss));
  // metrics.jsonl has the exit losses of both layers.
  std::ifstream f(a + "/metrics.jsonl");
  std::string line;
  std::getline(f, line);
  EXPECT_NE(line.find("\"exit_loss\":{\"1\":"), std::string::npos) << line;
}

TEST(LayerSkipTrain, WithoutTableTrainsExactlyAsBefore) {
  const std::string a = tmpdir("plain"), b = tmpdir("zeros");
  const std::string src = STRATA_SOURCE_DIR;
  auto recipe = [&](const std::string& dir, std::vector<std::string> extra) {
    std::vector<std::string> sets = {
        "run.device=\"cpu\"",
        "run.dir=\"" + dir + "\"",
        "data.dataset=\"" + a + "-data\"",
        "data.tokenizer=\"" + src + "/data/tokenizers/tok512.model\"",
        "data.inputs=[\"" + src + "/data/corpora/tinyshakespeare/input.txt\"]",
        "log.sample_prompt=\"\"",
        "training.steps=5"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return Recipe::load(src + "/recipes/debug.toml", sets, train_recipe_schema());
  };
  const TrainResult x = train(recipe(a, {}));
  const TrainResult y = train(recipe(
      b, {"layerskip.p_max=0.0", "layerskip.e_scale=0.0", "layerskip.curriculum=\"gradual\""}));
  EXPECT_EQ(x.losses, y.losses);
}

TEST(LayerSkipTrain, BadKeysAreOneLineErrors) {
  const std::string a = tmpdir("bad");
  EXPECT_ERROR(train(debug_recipe(a, {"layerskip.curriculum=\"spiral\""})),
               "layerskip.curriculum: unknown curriculum 'spiral'");
  EXPECT_ERROR(train(debug_recipe(a, {"layerskip.rotation=0"})), "layerskip.rotation");
}

}  // namespace
}  // namespace strata
