// The lp kind (Layer Parallelism): plan rules, every stream of LP and hybrid
// plans against a double reference of the deployed graph (paper eq. B.2),
// which differs from the PAR approximation; the pair's MLPs as one SwiGLU of
// width 2I; LayerSkip dropout and exits at pair boundaries; generation with
// the KV cache (one cache per original layer), early exit and
// self-speculation. Gradients: tests/model_grad_test.cpp; tensor
// parallelism: tests/mpi_model_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "eval/lp_scan.h"
#include "infer/generate.h"
#include "io/model_io.h"
#include "model/kinds/kinds.h"
#include "model/model.h"
#include "plan_reference.h"
#include "reference.h"
#include "testing.h"

namespace strata {
namespace {

using reference::Vec;
using testing::concat;
using testing::perturb_vectors;
using testing::prompt_of;
using testing::reference_streams;
using testing::tensor;
using testing::worst_rel;

LlamaConfig small_config(int layers, bool tied, bool bias) {
  return testing::plan_test_config(layers, tied, bias);
}

TEST(Lp, PlanRules) {
  const LayerPlan p = LayerPlan::parse("standard,lp*4,standard;lp_alpha=0.25", 6);
  const auto u = p.units();
  ASSERT_EQ(u.size(), 4u);  // standard, (1,2), (3,4), standard
  EXPECT_EQ(u[1].first, 1);
  EXPECT_EQ(u[1].size, 2);
  EXPECT_EQ(u[2].first, 3);
  EXPECT_EQ(p.number("lp_alpha", 0.5), 0.25);
  EXPECT_EQ(p.to_string(), "standard,lp*4,standard;lp_alpha=0.25");
  EXPECT_TRUE(p.unit_boundary(3));
  EXPECT_FALSE(p.unit_boundary(2));
  EXPECT_ERROR(p.check_exit(2, "exit layer"), "exit layer 2 falls inside a unit");
  EXPECT_ERROR(LayerPlan::parse("lp*3", 3),
               "the run of 3 lp layers from layer 0 is not a whole number of lp units");
  EXPECT_ERROR(LayerPlan::parse("lp,standard,lp", 3), "the run of 1 lp layers from layer 0");
  EXPECT_ERROR(LayerPlan::parse("standard*2;lp_alpha=0.3", 2),
               "option 'lp_alpha' belongs to lp layers and the plan has none");
  EXPECT_ERROR(LayerPlan::parse("lp*2;lp_alpha=1.5", 2),
               "option 'lp_alpha' must be a number in [0, 1], got '1.5'");
  EXPECT_ERROR(LayerPlan::parse("lp*2;lp_alpha=half", 2), "must be a number in [0, 1]");
  // An empty range is the standard plan.
  EXPECT_TRUE(LayerPlan::parse("standard*4", 4).plain());
}

// Every stream of `text` (with and without biases) against the reference of
// tests/plan_reference.h, and the loss; with `not_par`, the output differs
// from the PAR approximation's.
void expect_streams_match(const char* text, int layers, bool not_par) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(std::string(text) + (bias ? " bias" : ""));
    const LayerPlan plan = LayerPlan::parse(text, layers);
    Model<double> m(small_config(layers, !bias, bias), plan, ops::make_backend<double>());
    std::vector<int32_t> tokens;
    const auto x = testing::expect_streams_match_reference(m, plan, &tokens);
    if (not_par) {
      const auto par = reference_streams(m, plan, tokens, 2, 6, nullptr, true);
      EXPECT_GT(worst_rel(m.stream(int(x.size()) - 1), par.back()), 1e-3);
    }
  }
}

// Every stream against the deployed graph; the pair's output differs from
// the PAR approximation's (each MLP reading only its own layer's attention).
TEST(Lp, StreamsMatchTheDeployedGraphNotPar) {
  const std::pair<const char*, int> plans[] = {{"lp*2", 2},
                                               {"standard,lp*2,standard", 4},
                                               {"lp*4;lp_alpha=0.25", 4},
                                               {"lp*2,ladder,standard", 4},
                                               {"skip,lp*2,parallel", 4}};
  for (const auto& [text, layers] : plans) expect_streams_match(text, layers, true);
}

// MLP_k(u) + MLP_{k+1}(u) is one SwiGLU FFN of width 2I with the gate and up
// rows stacked and the down columns side by side.
TEST(Lp, PairMlpIsOneWideSwiGlu) {
  const LlamaConfig c = small_config(2, true, false);
  const LayerPlan plan = LayerPlan::parse("lp*2;lp_alpha=0.7", 2);
  Model<double> m(c, plan, ops::make_backend<double>());
  m.init_weights(7);
  perturb_vectors(m, 8);
  const int B = 2, T = 5, C = c.hidden_size, F = c.intermediate_size;
  const int64_t N = int64_t(B) * T;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 9);
  m.forward_hidden(tokens.data(), B, T, 2);
  const double* s1 = m.stream(1);
  const Vec h(s1, s1 + N * C);
  const auto& L0 = m.layout().layers[0];
  const auto& L1 = m.layout().layers[1];
  Vec norm = tensor(m, L0.post_norm);
  const Vec n1 = tensor(m, L1.post_norm);
  for (int k = 0; k < C; ++k) norm[size_t(k)] = 0.7 * norm[size_t(k)] + 0.3 * n1[size_t(k)];
  const Vec u = reference::rmsnorm(h, norm, N, C, c.rms_norm_eps);
  const Vec gate = concat(tensor(m, L0.gate), tensor(m, L1.gate));
  const Vec up = concat(tensor(m, L0.up), tensor(m, L1.up));
  const Vec d0 = tensor(m, L0.down), d1 = tensor(m, L1.down);
  Vec down(size_t(C) * 2 * F);  // [C, 2F]: row r = [down_0[r, :], down_1[r, :]]
  for (int r = 0; r < C; ++r)
    for (int j = 0; j < F; ++j) {
      down[size_t(r) * 2 * F + size_t(j)] = d0[size_t(r) * F + size_t(j)];
      down[size_t(r) * 2 * F + size_t(F + j)] = d1[size_t(r) * F + size_t(j)];
    }
  const Vec gu = reference::linear(u, concat(gate, up), nullptr, N, C, 4 * F);
  const Vec wide = reference::linear(reference::swiglu(gu, N, 2 * F), down, nullptr, N, 2 * F, C);
  const double* y = m.stream(4);
  double worst = 0;
  for (int64_t k = 0; k < N * C; ++k)
    worst = std::max(worst, std::abs((y[k] - h[size_t(k)]) - wide[size_t(k)]));
  EXPECT_LT(worst, 1e-12);
}

// LayerSkip: a pair is dropped as a whole (its layers share a mask); exits
// only at pair boundaries; the gathered path equals the reference.
TEST(Lp, LayerSkipDropoutAndExits) {
  const LlamaConfig c = small_config(4, true, true);
  const LayerPlan plan = LayerPlan::parse("lp*2,standard*2", 4);
  Model<double> m(c, plan, ops::make_backend<double>());
  m.init_weights(3);
  perturb_vectors(m, 4);
  const int B = 3, T = 5;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 5);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 6);
  LayerSkipStep skip;
  skip.keep = {{1, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  skip.exit_weight = {0.0, 0.4, 0.0, 0.6};
  m.zero_grad();
  m.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &skip);
  const auto x = reference_streams(m, plan, tokens, B, T, &skip.keep);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LT(worst_rel(m.stream(int(i)), x[i]), 1e-12) << i;
  skip.keep[1] = {1, 1, 1};
  EXPECT_ERROR(m.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &skip),
               "layers 0 and 1 form one unit but have different keep masks");
  skip.keep[1] = skip.keep[0];
  skip.exit_weight = {0.5, 0.0, 0.0, 0.5};
  EXPECT_ERROR(m.forward_backward(tokens.data(), targets.data(), B, T, 0.1, &skip),
               "an early-exit loss after layer 1 falls inside a unit");
}

// Finite differences through pairs with dropped samples and exit losses at
// pair boundaries, beside ladder layers (which leave input gradients to the
// pair's inner stream) and with an asymmetric norm mix.
TEST(Lp, GradientCheckWithDropoutAndExits) {
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = false;
  c.attention_bias = true;
  c.initializer_range = 0.4;
  c.finalize();
  for (const char* text : {"lp*2,ladder*2;lp_alpha=0.3", "ladder,lp*2,standard"}) {
    SCOPED_TRACE(text);
    Model<double> m(c, LayerPlan::parse(text, 4), ops::make_backend<double>());
    m.init_weights(8);
    perturb_vectors(m, 9);
    const int B = 3, T = 4;
    const auto tokens = testing::random_tokens(B * T, c.vocab_size, 4);
    const auto targets = testing::random_tokens(B * T, c.vocab_size, 5);
    LayerSkipStep s;
    const bool first_pair = text[0] == 'l' && text[1] == 'p';
    s.keep = first_pair
                 ? std::vector<std::vector<uint8_t>>{{1, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 0}}
                 : std::vector<std::vector<uint8_t>>{{1, 0, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 0}};
    s.exit_weight =
        first_pair ? std::vector<double>{0, 0.3, 0.2, 0.5} : std::vector<double>{0.3, 0, 0.2, 0.5};
    const double dloss = 1.0 / 11;
    m.zero_grad();
    m.forward_backward(tokens.data(), targets.data(), B, T, dloss, &s);
    const std::vector<double> analytic(m.grads(), m.grads() + m.num_params());
    auto objective = [&] {
      return dloss * m.forward_backward(tokens.data(), targets.data(), B, T, dloss, &s).objective;
    };
    for (const auto& t : m.layout().tensors())
      testing::expect_gradient(objective, m.params() + t.offset, t.numel,
                               analytic.data() + t.offset, t.name);
  }
}

// PAR groups (the paper's section 3): streams against the reference for
// groups of 2, 3 and a whole stretch, with biases; plan rules.
TEST(Par, StreamsMatchTheReference) {
  const std::pair<const char*, int> plans[] = {{"par*2", 2},
                                               {"standard,par*2,standard", 4},
                                               {"par*4", 4},
                                               {"par*3,standard;par_group=3", 4},
                                               {"par*4;par_group=4", 4},
                                               {"lp*2,par*2", 4}};
  for (const auto& [text, layers] : plans) expect_streams_match(text, layers, false);
  EXPECT_EQ(LayerPlan::parse("par*6;par_group=3", 6).units().size(), 2u);
  EXPECT_ERROR(LayerPlan::parse("par*3", 3),
               "the run of 3 par layers from layer 0 is not a whole "
               "number of par units (2 layers each)");
  EXPECT_ERROR(LayerPlan::parse("par*4;par_group=2.5", 4),
               "option 'par_group' must be a whole number in [2, 1000], got '2.5'");
  EXPECT_ERROR(LayerPlan::parse("par*2,ladder", 3), "layer 2 is a ladder layer right after a par");
  EXPECT_ERROR(LayerPlan::parse("par*2", 2).check_exit(1, "exit layer"), "falls inside a unit");
}

TEST(Par, GenerationEqualsNoCache) {
  for (const char* plan : {"par*2,standard*2", "par*4;par_group=4"}) {
    SCOPED_TRACE(plan);
    const LlamaConfig c = small_config(4, true, true);
    Model<float> m(c, LayerPlan::parse(plan, 4), ops::make_backend<float>());
    m.init_weights(12);
    GenerateOptions o;
    o.max_new_tokens = 16;
    auto p = testing::random_tokens(6, 61, 3);
    p[0] = 1;
    EXPECT_EQ(generate(m, p, o), generate_simple(m, p, o));
  }
}

// strata lp merge: layers [1, 3) of a 4-layer checkpoint become one layer
// holding the mean of every tensor; the others keep theirs, shifted down.
TEST(Lp, MergeAveragesTheRange) {
  const LlamaConfig c = small_config(4, false, true);
  Model<float> m(c, ops::make_backend<float>());
  m.init_weights(5);
  for (int64_t i = 0; i < m.num_params(); ++i) m.params()[i] += 0.001f * float(i % 7);
  const auto dir = std::filesystem::temp_directory_path() / "strata_lp_merge";
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "in.h5").string(), out = (dir / "out.h5").string();
  save_model(in, m, "", nlohmann::json::object());
  std::vector<std::string> argv_s = {"strata", "lp", "merge", in, out, "--range", "1:3"};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  ASSERT_EQ(cli::cmd_lp(int(argv.size()), argv.data(), 2), 0);
  CheckpointInfo info;
  auto merged = load_model(out, &info);
  ASSERT_EQ(merged->config().num_hidden_layers, 3);
  for (const auto& t : merged->layout().tensors()) {
    const int k = int(&t - &merged->layout().tensors()[0]);
    const float* got = merged->param(k);
    auto src = [&](const std::string& name) { return m.param(m.layout().find(name)); };
    std::vector<float> want(size_t(t.numel));
    if (t.name.rfind("model.layers.1.", 0) == 0) {
      const std::string rest = t.name.substr(15);
      for (int64_t i = 0; i < t.numel; ++i)
        want[size_t(i)] = (src("model.layers.1." + rest)[i] + src("model.layers.2." + rest)[i]) / 2;
    } else if (t.name.rfind("model.layers.2.", 0) == 0) {
      std::copy_n(src("model.layers.3." + t.name.substr(15)), t.numel, want.begin());
    } else {
      std::copy_n(src(t.name), t.numel, want.begin());
    }
    for (int64_t i = 0; i < t.numel; ++i) ASSERT_FLOAT_EQ(got[i], want[size_t(i)]) << t.name;
  }
  argv_s = {"strata", "lp", "merge", in, out, "--range", "2:3"};
  argv.clear();
  for (auto& a : argv_s) argv.push_back(a.data());
  EXPECT_ERROR(cli::cmd_lp(int(argv.size()), argv.data(), 2), "must hold at least 2");
  std::filesystem::remove_all(dir);
}

// strata lp scan's library call over a made-up perplexity per plan: every
// range scored, the best end per length, the largest length within the
// tolerance recommended, and the table that shows them.
TEST(Lp, ScanRecommendsTheLargestRangeWithinTheTolerance) {
  const std::map<std::string, double> ppl = {{"standard*4", 10.0},
                                             {"lp*2,standard*2", 10.4},
                                             {"standard,lp*2,standard", 10.2},
                                             {"standard*2,lp*2", 10.3},
                                             {"lp*4", 12.0}};
  std::vector<std::string> asked;
  auto perplexity = [&](const std::string& plan) {
    asked.push_back(plan);
    PerplexityResult r;
    r.tokens = 100;
    r.nll_sum = 100 * std::log(ppl.at(plan));
    return r;
  };
  LpScanOptions o;
  o.deltas = {2, 4};
  const LpScanResult r = lp_scan(perplexity, 4, o);
  EXPECT_EQ(asked.size(), 5u);
  EXPECT_EQ(r.json["best"]["2"]["end"], 3);
  EXPECT_EQ(r.json["best"]["4"]["effective_depth"], 2);
  EXPECT_EQ(r.json["recommended"]["plan"], "standard,lp*2,standard");
  EXPECT_TRUE(std::isnan(r.grid[1][3]));  // D = 4 cannot end at 3
  const std::string table = lp_scan_table(r, o, "text.txt");
  EXPECT_NE(table.find("standard: ppl 10.0000 over 100 tokens (text.txt)"), std::string::npos);
  EXPECT_NE(table.find("recommended: D = 2 at [1, 3), ppl 10.2000 (+2.00%), effective depth 3"),
            std::string::npos)
      << table;
  o.tolerance = 1;
  EXPECT_TRUE(lp_scan(perplexity, 4, o).json["recommended"].is_null());
  EXPECT_EQ(transform_plan("stretch", 6, 1, 4, 0.5), "standard,par*3,standard*2;par_group=3");
  EXPECT_EQ(transform_plan("lp", 4, 0, 2, 0.25), "lp*2,standard*2;lp_alpha=0.25");
  EXPECT_EQ(find_lp_transform("nope"), nullptr);
}

// Shuffle (the study's section 3 a): pass p runs the run's layers in the
// order shuffle_permutation(seed, first, n, p), a new one every forward; each
// pass's loss and every gradient equal those of the standard model with its
// layers put in that order (weights moved), which the gradient checks cover.
TEST(Shuffle, EachPassIsTheStandardModelReordered) {
  const LlamaConfig c = small_config(5, false, true);
  const LayerPlan plan = LayerPlan::parse("standard,shuffle*3,standard;shuffle_seed=9", 5);
  ASSERT_EQ(plan.units().size(), 3u);
  EXPECT_EQ(plan.units()[1].size, 3);
  EXPECT_ERROR(plan.check_exit(2, "exit layer"), "falls inside a unit");
  Model<double> m(c, plan, ops::make_backend<double>());
  m.init_weights(4);
  perturb_vectors(m, 5);
  const int B = 2, T = 5;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 6);
  const auto targets = testing::random_tokens(B * T, c.vocab_size, 7);
  std::set<std::vector<int>> seen;
  for (uint64_t pass = 0; pass < 5; ++pass) {
    const auto perm = kinds::shuffle_permutation(9, 1, 3, pass);
    seen.insert(perm);
    Model<double> ref(c, ops::make_backend<double>());
    auto layer_of = [&](int l) { return l >= 1 && l <= 3 ? 1 + perm[size_t(l - 1)] : l; };
    auto name_in = [&](const std::string& name, int l) {  // the same tensor of layer l
      const std::string key = "model.layers.";
      if (name.rfind(key, 0) != 0) return name;
      return key + std::to_string(l) + name.substr(name.find('.', key.size()));
    };
    for (const auto& t : ref.layout().tensors()) {
      const int k = int(&t - &ref.layout().tensors()[0]);
      int l = -1;
      if (t.name.rfind("model.layers.", 0) == 0) l = std::stoi(t.name.substr(13));
      const int src = m.layout().find(l < 0 ? t.name : name_in(t.name, layer_of(l)));
      std::copy_n(m.param(src), t.numel, ref.param(k));
    }
    m.zero_grad();
    ref.zero_grad();
    const double a = m.forward_backward(tokens.data(), targets.data(), B, T, 0.1).loss_sum;
    const double b = ref.forward_backward(tokens.data(), targets.data(), B, T, 0.1).loss_sum;
    EXPECT_NEAR(a, b, 1e-12 * std::abs(b)) << "pass " << pass;
    for (const auto& t : ref.layout().tensors()) {
      const int k = int(&t - &ref.layout().tensors()[0]);
      int l = -1;
      if (t.name.rfind("model.layers.", 0) == 0) l = std::stoi(t.name.substr(13));
      const int src = m.layout().find(l < 0 ? t.name : name_in(t.name, layer_of(l)));
      for (int64_t i = 0; i < t.numel; ++i)
        ASSERT_NEAR(m.grad(src)[i], ref.grad(k)[i], 1e-12 * (1 + std::abs(ref.grad(k)[i])))
            << t.name << " pass " << pass;
    }
  }
  EXPECT_GE(seen.size(), 2u) << "the order never changed";
  // Generation refuses it: a KV cache cannot follow a changing order.
  Model<float> f(c, plan, ops::make_backend<float>());
  f.init_weights(1);
  GenerateOptions o;
  o.max_new_tokens = 2;
  EXPECT_ERROR(generate(f, {1, 2}, o), "has shuffle layers");
}

std::unique_ptr<Model<float>> lp_model(const char* plan, int layers, bool bias, uint64_t seed) {
  const LlamaConfig c = small_config(layers, !bias, bias);
  auto m =
      std::make_unique<Model<float>>(c, LayerPlan::parse(plan, layers), ops::make_backend<float>());
  m->init_weights(seed);
  return m;
}

// Generation keeps one KV cache per original layer: equals the cache-free
// path; early exit at a pair boundary equals the cut model; self-speculation
// equals plain greedy decoding; an exit inside a pair is refused.
TEST(Lp, Generation) {
  for (const char* plan : {"lp*2,standard*2", "standard,lp*2,standard", "lp*4;lp_alpha=0.2"}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(plan);
      auto m = lp_model(plan, 4, bias, 12);
      testing::expect_cache_matches_no_cache(*m, 20);
    }
  }
  auto m = lp_model("lp*2,standard*2", 4, false, 14);
  LlamaConfig c2 = m->config();
  c2.num_hidden_layers = 2;
  Model<float> cut(c2, LayerPlan::parse("lp*2", 2), ops::make_backend<float>());
  testing::copy_by_name(*m, cut);
  GenerateOptions o;
  o.max_new_tokens = 16;
  const auto p = prompt_of(6, 4);
  const auto plain = generate(*m, p, o);
  const auto expected = generate_simple(cut, p, o);
  o.exit_layer = 2;
  EXPECT_EQ(generate(*m, p, o), expected);
  o.speculations = 3;
  EXPECT_EQ(generate(*m, p, o), plain);  // self-speculative: drafts from the pair
  o.exit_layer = 1;
  EXPECT_ERROR(generate(*m, p, o), "falls inside a unit");
  o.exit_layer = 0;
  o.speculations = 0;
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(3, 5), prompt_of(9, 6)};
  const auto batch = generate_batch(*m, prompts, o);
  for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(batch[k], generate(*m, prompts[k], o));
}

}  // namespace
}  // namespace strata
