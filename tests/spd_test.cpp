// The spd kind (SPD, Sync-Point Drop): plan rules, every stream of SPD and
// hybrid plans at degree 2 and 4 against a double reference of the per-device
// maths built from explicitly sliced weights (tests/plan_reference.h), with
// and without the o_proj bias; degree 1 is the standard layer bitwise; KV-cache
// generation. Gradients: tests/model_grad_test.cpp; real tensor parallelism
// against the simulation: tests/mpi_model_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "cli/commands.h"
#include "cli/spd.h"
#include "core/error.h"
#include "core/file.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
#include "model/kinds/kinds.h"
#include "model/model.h"
#include "plan_reference.h"
#include "reference.h"
#include "testing.h"
#include "train/optimizer.h"
#include "train/spd.h"

namespace strata {
namespace {

using testing::perturb_vectors;
using testing::reference_streams;
using testing::tensor;
using testing::worst_rel;

LlamaConfig spd_config(int layers, int kv_heads, bool bias) {
  return testing::plan_test_config(layers, !bias, bias, kv_heads);
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
      Model<double> m(spd_config(p.layers, p.kv, bias), plan, ops::make_backend<double>());
      std::vector<int32_t> tokens;
      const auto x = testing::expect_streams_match_reference(m, plan, &tokens);
      // Dropping the sync point changes the function (it is an approximation).
      const auto standard = reference_streams(m, LayerPlan::standard(p.layers), tokens, 2, 6);
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

// A 3-layer model (4 heads and KV heads, the 512-token tokenizer) saved as a
// checkpoint in a fresh temporary directory, for the CLI tests.
struct CliModel {
  std::filesystem::path dir;
  std::unique_ptr<Model<float>> m;
  std::string tok_path, ckpt, text;
  CliModel(const std::string& name, uint64_t seed) {
    dir = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    LlamaConfig c = spd_config(3, 4, false);
    c.vocab_size = 512;
    c.finalize();
    m = std::make_unique<Model<float>>(c, LayerPlan::standard(3), ops::make_backend<float>());
    m->init_weights(seed);
    tok_path = std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model";
    ckpt = (dir / "m.h5").string();
    text = (dir / "t.txt").string();
    save_model(ckpt, *m, read_file(tok_path, "tokenizer"), nlohmann::json::object());
  }
  ~CliModel() { std::filesystem::remove_all(dir); }
};

// `strata spd ...` in this process; its status.
int run_spd(std::vector<std::string> a) {
  a.insert(a.begin(), {"strata", "spd"});
  std::vector<char*> argv;
  for (auto& x : a) argv.push_back(x.data());
  return cli::cmd_spd(int(argv.size()), argv.data(), 2);
}

// `strata spd scan`: PPL_L is the standard perplexity, every S_k follows from
// the perplexities it was computed from, the ranking orders the blocks by S,
// and the budget's ends are the scan's ends (none / all blocks in SPD).
TEST(Spd, ScanIsConsistent) {
  CliModel cm("strata_spd_scan_test", 13);
  Model<float>& m = *cm.m;
  const std::string &ckpt = cm.ckpt, &text = cm.text, &tok_path = cm.tok_path;
  const auto& dir = cm.dir;
  write_file_atomic(text,
                    "Once upon a time there was a little dog. It liked to run in the park "
                    "with its friend, a big cat who did not like to run at all.\n");
  const std::string out = (dir / "scan.json").string();
  ASSERT_EQ(run_spd({"scan", "--checkpoint", ckpt, "--text", text, "--degree", "4", "--window",
                     "16", "--out", out, "--quiet"}),
            0);
  const auto js = nlohmann::json::parse(read_file(out, "scan"));
  const Tokenizer tok = Tokenizer::load(tok_path);
  const double base =
      text_perplexity(m, tok, read_file(text, "text"), text, 16, 0, 8, {3}, false).back().ppl();
  EXPECT_NEAR(js["standard_ppl"].get<double>(), base, 1e-9 * base);
  const auto& sens = js["sensitivity"];
  ASSERT_EQ(sens.size(), 4u);  // k = 3, 2, 1, 0
  EXPECT_EQ(sens[0]["ppl"].get<double>(), js["standard_ppl"].get<double>());
  for (size_t r = 1; r < sens.size(); ++r) {
    const double p = sens[r]["ppl"], prev = sens[r - 1]["ppl"];
    EXPECT_NEAR(sens[r]["sensitivity"].get<double>(), (p - prev) / prev, 1e-12);
    EXPECT_NE(p, prev);  // another block in SPD changes the model
  }
  std::vector<int> ranking = js["ranking"];
  EXPECT_EQ(std::set<int>(ranking.begin(), ranking.end()), (std::set<int>{0, 1, 2}));
  auto s_of = [&](int l) { return sens[size_t(3 - l)]["sensitivity"].get<double>(); };
  for (size_t r = 1; r < ranking.size(); ++r) EXPECT_LE(s_of(ranking[r - 1]), s_of(ranking[r]));
  const auto& budget = js["budget"];
  ASSERT_EQ(budget.size(), 4u);
  EXPECT_EQ(budget[0]["ppl"].get<double>(), sens[0]["ppl"].get<double>());
  EXPECT_EQ(budget[3]["ppl"].get<double>(), sens[3]["ppl"].get<double>());
  EXPECT_EQ(budget[1]["blocks"][0].get<int>(), ranking[0]);
  EXPECT_EQ(budget[3]["plan"].get<std::string>(), "spd*3;spd_degree=4");
}

// ------------------------------------------------ Algorithm 1's offline tools

// block_forward runs one unit on a given input exactly as the whole model
// does, and block_backward's weight gradients pass a finite-difference check.
TEST(Spd, BlockForwardAndBackward) {
  const LlamaConfig c = spd_config(3, 4, true);
  const LayerPlan plan = LayerPlan::parse("standard,spd,standard;spd_degree=4", 3);
  Model<double> m(c, plan, ops::make_backend<double>());
  m.init_weights(21);
  perturb_vectors(m, 3);
  const int B = 2, T = 5, C = c.hidden_size;
  const auto tokens = testing::random_tokens(B * T, c.vocab_size, 4);
  m.forward_hidden(tokens.data(), B, T, 3);
  const double *s2 = m.stream(2), *s4 = m.stream(4);
  const std::vector<double> x(s2, s2 + B * T * C);
  const std::vector<double> y(s4, s4 + B * T * C);
  const double* out = m.block_forward(1, x.data(), B, T);
  for (int i = 0; i < B * T * C; ++i) ASSERT_EQ(out[i], y[size_t(i)]);
  // L = sum(out * R): dL/dout = R.
  const auto R = testing::random_vec<double>(B * T * C, 5);
  auto loss = [&] {
    const double* o = m.block_forward(1, x.data(), B, T);
    double s = 0;
    for (int i = 0; i < B * T * C; ++i) s += o[i] * R[size_t(i)];
    return s;
  };
  m.zero_grad();
  loss();
  m.block_backward(R.data());
  const auto& P = m.layout().layers[1];
  for (int t : {P.input_norm, P.q, P.v, P.q_bias, P.o, P.o_bias, P.post_norm, P.up, P.down}) {
    const ParamInfo& info = m.layout()[t];
    for (int64_t k : {int64_t(0), info.numel / 2, info.numel - 1}) {
      double* w = m.param(t) + k;
      const double w0 = *w, h = 1e-5;
      *w = w0 + h;
      const double up = loss();
      *w = w0 - h;
      const double down = loss();
      *w = w0;
      const double fd = (up - down) / (2 * h), an = m.grad(t)[k];
      EXPECT_NEAR(an, fd, 1e-6 * (1 + std::abs(fd))) << info.name << "[" << k << "]";
    }
  }
  // Nothing outside the block gets a gradient.
  for (const ParamInfo& info : m.layout().tensors()) {
    if (info.layer == 1) continue;
    for (int64_t k = 0; k < info.numel; ++k)
      ASSERT_EQ(m.grads()[info.offset + k], 0.0) << info.name;
  }
}

// Head grouping's permutation leaves the standard model's logits unchanged
// and changes the SPD model's; group_heads returns a valid grouping.
TEST(Spd, HeadPermutationKeepsTheStandardModel) {
  for (int kv : {4, 2}) {
    SCOPED_TRACE(kv);
    const LlamaConfig c = spd_config(2, kv, true);
    Model<float> m(c, LayerPlan::standard(2), ops::make_backend<float>());
    m.init_weights(23);
    const int B = 2, T = 9, V = c.vocab_size;
    const auto windows = spd::calibration_windows(testing::random_tokens(200, V, 6), 4, T, 7);
    std::vector<int32_t> in;
    for (int w = 0; w < B; ++w)
      in.insert(in.end(), windows.begin() + w * (T + 1), windows.begin() + w * (T + 1) + T);
    std::vector<float> before(size_t(B * T * V)), after(before.size()), spd0(before.size()),
        spd1(before.size());
    const LayerPlan spd_plan = LayerPlan::parse("standard,spd;spd_degree=2", 2);
    m.forward_logits(in.data(), B, T, before.data());
    m.set_plan(spd_plan);
    m.forward_logits(in.data(), B, T, spd0.data());
    m.set_plan(LayerPlan::standard(2));
    const auto io = spd::capture_blocks(m, windows, 4, T, 3, {1});
    const spd::HeadGrouping hg = spd::group_heads(m, 1, 2, io[0].x, 4, T, 1, 8);
    ASSERT_EQ(hg.units, kv);
    std::vector<int> order = hg.unit_order;
    std::sort(order.begin(), order.end());
    for (int u = 0; u < kv; ++u) EXPECT_EQ(order[size_t(u)], u);
    EXPECT_GE(hg.spread_after, hg.spread_before - 1e-9);
    for (int a = 0; a < kv; ++a)
      for (int b = 0; b < kv; ++b) {
        EXPECT_EQ(hg.distance[size_t(a)][size_t(b)], hg.distance[size_t(b)][size_t(a)]);
        if (a != b) {
          EXPECT_GT(hg.distance[size_t(a)][size_t(b)], 0);
        }
      }
    // A permutation that moves units across the two halves.
    std::vector<int> swap(static_cast<size_t>(kv));
    std::iota(swap.begin(), swap.end(), 0);
    std::rotate(swap.begin(), swap.begin() + 1, swap.end());
    spd::permute_heads(m, 1, swap);
    m.forward_logits(in.data(), B, T, after.data());
    double worst = 0, moved = 0;
    for (size_t i = 0; i < before.size(); ++i)
      worst = std::max(worst, double(std::abs(after[i] - before[i])) / (1 + std::abs(before[i])));
    EXPECT_LT(worst, 2e-5);
    m.set_plan(spd_plan);
    m.forward_logits(in.data(), B, T, spd1.data());
    for (size_t i = 0; i < before.size(); ++i)
      moved = std::max(moved, double(std::abs(spd1[i] - spd0[i])));
    EXPECT_GT(moved, 1e-3);
  }
}

TEST(Spd, AnticlusteringAndMatching) {
  // Two tight pairs {0, 1} and {2, 3}: the best 2 groups split both pairs.
  const std::vector<std::vector<double>> d = {
      {0, 1, 9, 8}, {1, 0, 8, 9}, {9, 8, 0, 1}, {8, 9, 1, 0}};
  const auto groups = spd::anticluster(d, 2, 3, 4);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(groups[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(spd::within_group_sum(d, groups), 18);
  EXPECT_ERROR(spd::anticluster(d, 3, 1, 1), "3 groups do not divide 4 items");
  // The Hungarian algorithm finds the exhaustive optimum.
  for (int n : {1, 2, 3, 5, 7}) {
    const auto r = testing::random_vec<double>(n * n, uint32_t(n));
    std::vector<std::vector<double>> s(static_cast<size_t>(n),
                                       std::vector<double>(static_cast<size_t>(n)));
    for (int i = 0; i < n * n; ++i) s[size_t(i / n)][size_t(i % n)] = r[size_t(i)];
    const auto a = spd::best_assignment(s), b = spd::best_assignment_exhaustive(s);
    double sa = 0, sb = 0;
    for (int i = 0; i < n; ++i) {
      sa += s[size_t(i)][size_t(a[size_t(i)])];
      sb += s[size_t(i)][size_t(b[size_t(i)])];
    }
    EXPECT_NEAR(sa, sb, 1e-12) << n;
  }
}

// Block-to-block distillation: the first step's loss is the zero-shot SPD
// block's MSE against the original block (computed here from two whole-model
// forwards), the loss falls, and only the block's weights change.
TEST(Spd, DistillationStartsAtTheZeroShotMseAndFalls) {
  const LlamaConfig c = spd_config(3, 2, false);
  Model<float> m(c, LayerPlan::standard(3), ops::make_backend<float>());
  m.init_weights(29);
  const int n = 6, T = 8, C = c.hidden_size;
  const auto windows =
      spd::calibration_windows(testing::random_tokens(300, c.vocab_size, 8), n, T, 9);
  const auto io = spd::capture_blocks(m, windows, n, T, 4, {1});
  // The zero-shot SPD model's block 1 output, from its own full forward.
  const LayerPlan plan = LayerPlan::parse("standard,spd,standard;spd_degree=2", 3);
  m.set_plan(plan);
  double mse = 0;
  for (int w = 0; w < n; ++w) {
    std::vector<int32_t> in(windows.begin() + w * (T + 1), windows.begin() + w * (T + 1) + T);
    m.forward_hidden(in.data(), 1, T, 3);
    for (int i = 0; i < T * C; ++i) {
      const double d = double(m.hidden_state(1)[i]) - io[0].y[size_t(w * T * C + i)];
      mse += d * d;
    }
  }
  mse /= double(n) * T * C;
  std::vector<std::vector<float>> layers;
  for (int l = 0; l < 3; ++l) layers.push_back(spd::layer_snapshot(m, l));
  spd::DistillConfig dc;
  dc.lr = 1e-3;
  dc.epochs = 4;
  dc.batch = n;  // one step per epoch over every window: its loss is the full MSE
  dc.progress = false;
  const spd::DistillResult r = spd::distill_block(m, 1, io[0], n, T, dc);
  EXPECT_NEAR(r.first_step_mse, mse, 1e-5 * mse);
  EXPECT_NEAR(r.initial_mse, mse, 1e-5 * mse);
  EXPECT_EQ(r.steps, 4);
  ASSERT_EQ(r.epoch_mse.size(), 4u);
  for (size_t e = 1; e < r.epoch_mse.size(); ++e) EXPECT_LT(r.epoch_mse[e], r.epoch_mse[e - 1]);
  EXPECT_LT(r.final_mse, 0.9 * r.initial_mse);
  EXPECT_EQ(spd::layer_snapshot(m, 0), layers[0]);
  EXPECT_EQ(spd::layer_snapshot(m, 2), layers[2]);
  EXPECT_NE(spd::layer_snapshot(m, 1), layers[1]);
  EXPECT_EQ(m.trainable_mask(), std::vector<bool>(m.layout().tensors().size(), true));
  // restore_layer puts the original back.
  spd::restore_layer(m, 1, layers[1]);
  EXPECT_EQ(spd::block_mse(m, 1, io[0], n, T, n), r.initial_mse);
}

// The block trains in a model of its own (spd::block_model): the same steps,
// bit for bit, as training it inside the whole model, which then needs no
// gradient arena; and capturing blocks one at a time equals capturing them
// together.
TEST(Spd, BlockModelTrainsAsTheWholeModelWould) {
  const LlamaConfig c = spd_config(3, 2, false);
  const int n = 1, T = 8;
  const auto windows =
      spd::calibration_windows(testing::random_tokens(300, c.vocab_size, 8), n, T, 9);
  Model<float> m(c, LayerPlan::standard(3), ops::make_backend<float>());
  m.init_weights(29);
  const auto io = spd::capture_blocks(m, windows, n, T, 1, {0, 1});
  const auto one = spd::capture_blocks(m, windows, n, T, 1, {1});
  EXPECT_EQ(one[0].x, io[1].x);
  EXPECT_EQ(one[0].y, io[1].y);
  Model<float> ref(c, LayerPlan::standard(3), ops::make_backend<float>());
  ref.init_weights(29);
  const LayerPlan plan = LayerPlan::parse("standard,spd,standard;spd_degree=2", 3);
  m.set_plan(plan);
  ref.set_plan(plan);
  spd::DistillConfig dc;
  dc.lr = 1e-3;
  dc.epochs = 3;
  dc.progress = false;
  const spd::DistillResult r = spd::distill_block(m, 1, io[1], n, T, dc);
  EXPECT_EQ(m.gradient_bytes(), 0) << "the whole model allocated gradients";
  // The reference: the same AdamW steps on the whole model.
  std::vector<bool> mask(ref.layout().tensors().size(), false);
  for (size_t t = 0; t < mask.size(); ++t) mask[t] = ref.layout()[int(t)].layer == 1;
  ref.set_trainable(mask);
  AdamWConfig ac;
  ac.beta1 = 0.9, ac.beta2 = 0.999, ac.eps = 1e-8, ac.weight_decay = 0, ac.grad_clip = 0;
  AdamW<float> opt(ref.backend(), ref.layout(), ac, mask);
  const int64_t S = int64_t(T) * c.hidden_size;
  std::vector<float> dout(static_cast<size_t>(S));
  for (int e = 0; e < dc.epochs; ++e) {
    const float* out = ref.block_forward(1, io[1].x.data(), 1, T);
    const double loss = ref.backend().mse_forward(out, io[1].y.data(), S);
    EXPECT_EQ(loss, r.epoch_mse[size_t(e)]) << "epoch " << e;
    ref.zero_grad();
    std::fill(dout.begin(), dout.end(), 0.f);
    ref.backend().mse_backward(dout.data(), nullptr, out, io[1].y.data(), S, 1.0);
    ref.block_backward(dout.data());
    opt.step(ref.params(), ref.grads(), dc.lr);
  }
  for (int l = 0; l < 3; ++l)
    EXPECT_EQ(spd::layer_snapshot(m, l), spd::layer_snapshot(ref, l)) << "layer " << l;
}

// The memory `strata spd` checks before it loads a model (and --dry-run
// prints): the block model's and the captured blocks' parts follow the
// settings; a small capture budget still captures one block.
TEST(Spd, PipelineMemoryFollowsTheSettings) {
  LlamaConfig c = spd_config(4, 2, false);
  c.finalize();
  const int64_t gb = int64_t(1) << 30;
  const spd::PipelineMemory a = spd::pipeline_memory(c, 2, 16, 8, 4, 1, 4, gb);
  const spd::PipelineMemory b = spd::pipeline_memory(c, 2, 16, 8, 4, 1, 4, 1);
  EXPECT_EQ(a.capture_layers, 4);  // at most the budget's blocks
  EXPECT_EQ(b.capture_layers, 1);
  const int64_t per_block = 2 * 16 * 8 * int64_t(c.hidden_size) * 4;
  EXPECT_EQ(a.memory.bytes_of("captured blocks"), 4 * per_block);
  EXPECT_EQ(b.memory.bytes_of("captured blocks"), per_block);
  // A larger calibration batch, a larger activation arena; the same weights.
  const spd::PipelineMemory big = spd::pipeline_memory(c, 2, 16, 8, 8, 1, 4, gb);
  EXPECT_GT(big.memory.bytes_of("activations (calibration passes)"),
            a.memory.bytes_of("activations (calibration passes)"));
  EXPECT_EQ(big.memory.bytes_of("weights"), a.memory.bytes_of("weights"));
  // The block model is what distill_block builds: one layer.
  Model<float> m(c, LayerPlan::parse("spd*4;spd_degree=2", 4), ops::make_backend<float>());
  const auto blk = spd::block_model(m, 2);
  EXPECT_EQ(blk->config().num_hidden_layers, 1);
  EXPECT_EQ(spd::layer_snapshot(*blk, 0), spd::layer_snapshot(m, 2));
  EXPECT_GT(a.memory.bytes_of("block model (B2B)"), 4 * spd::layer_numel(m, 2) * 4);
}

TEST(Spd, CalibrationWindows) {
  std::vector<int32_t> ids(50);
  std::iota(ids.begin(), ids.end(), 0);
  const auto a = spd::calibration_windows(ids, 8, 9, 1), b = spd::calibration_windows(ids, 8, 9, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, spd::calibration_windows(ids, 8, 9, 2));
  for (int w = 0; w < 8; ++w)
    for (int k = 1; k < 10; ++k) EXPECT_EQ(a[size_t(w * 10 + k)], a[size_t(w * 10)] + k);
  EXPECT_ERROR(spd::calibration_windows(ids, 1, 50, 1),
               "the text has 50 tokens, fewer than one window of 51");
}

// `strata spd <recipe.toml>`: classes follow the thresholds, every non-ISB
// block is distilled, the SPD checkpoint carries the plan, the distilled
// weights and the metadata, and a rerun reuses every result.
TEST(Spd, PipelineWritesCheckpointAndResumes) {
  namespace fs = std::filesystem;
  CliModel cm("strata_spd_pipeline_test", 31);
  Model<float>& m = *cm.m;
  const std::string &ckpt = cm.ckpt, &text = cm.text, &tok_path = cm.tok_path;
  const auto& dir = cm.dir;
  std::string words;
  for (int i = 0; i < 20; ++i)
    words += "Once upon a time there was a little dog. It liked to run in the park. ";
  write_file_atomic(text, words);
  const std::string recipe = (dir / "r.toml").string(), out = (dir / "out").string();
  // tau1 below every S: nothing is ISB; tau2 between (set after the scan).
  auto run = [&](const std::string& tau2) {
    write_file_atomic(recipe,
                      cat("[spd]\ncheckpoint = \"", ckpt, "\"\ndegree = 2\nbudget = 2\n",
                          "tau1 = -100.0\ntau2 = ", tau2, "\nout_dir = \"", out, "\"\n",
                          "[calibration]\ntext = \"", text, "\"\nsamples = 3\nseq_len = 12\n",
                          "[b2b]\nlr = 1e-3\nepochs = 2\n[report]\ntext = \"", text, "\"\n"));
    ::testing::internal::CaptureStdout();
    const int rc = run_spd({recipe, "--quiet"});
    ::testing::internal::GetCapturedStdout();
    return rc;
  };
  ASSERT_EQ(run("100.0"), 0);
  auto rep = nlohmann::json::parse(read_file(out + "/report.json", "report"));
  std::vector<int> ranking = rep["ranking"];
  ASSERT_EQ(ranking.size(), 3u);
  // The second-ranked block becomes the ESB on the next run.
  const double s0 = rep["blocks"][size_t(ranking[0])]["sensitivity"];
  const double s1 = rep["blocks"][size_t(ranking[1])]["sensitivity"];
  const std::string tau2 = std::to_string((s0 + s1) / 2);
  const std::string job0 = cat(out, "/blocks/block_", ranking[0], "_b2b.f32");
  const auto stamp = fs::last_write_time(job0);
  ASSERT_EQ(run(tau2), 0);  // thresholds are not part of the fingerprint: jobs are reused
  EXPECT_EQ(fs::last_write_time(job0), stamp);
  rep = nlohmann::json::parse(read_file(out + "/report.json", "report"));
  for (const auto& b : rep["blocks"]) {
    const double s = b["sensitivity"];
    EXPECT_EQ(b["class"].get<std::string>(), s > std::stod(tau2) ? "ESB" : "SB");
    EXPECT_EQ(b["selected"].get<bool>(), b["rank"].get<int>() < 2);
  }
  // SB: b2b; ESB: b2b (ablation) and hg + b2b.
  const auto& jobs = rep["jobs"];
  ASSERT_EQ(jobs.size(), 3u);
  for (const auto& j : jobs)
    EXPECT_LT(j["mse_distilled"].get<double>(), j["mse_zero_shot"].get<double>());
  EXPECT_EQ(jobs[2]["layer"].get<int>(), ranking[1]);
  EXPECT_TRUE(jobs[2]["head_grouping"].get<bool>());
  EXPECT_EQ(jobs[2]["head_order"].size(), 4u);
  // The checkpoint: plan, metadata, and the perplexity the report gives for +HG.
  CheckpointInfo info;
  auto spd_model = load_model(out + "/spd.h5", &info);
  std::vector<bool> on(3, false);
  on[size_t(ranking[0])] = on[size_t(ranking[1])] = true;
  EXPECT_EQ(info.plan.to_string(), spd_plan_text(3, on, 2));
  EXPECT_EQ(info.state["spd"]["degree"].get<int>(), 2);
  EXPECT_EQ(info.state["spd"]["blocks"][1]["treatment"].get<std::string>(), "hg+b2b");
  EXPECT_EQ(info.state["spd"]["blocks"][1]["head_order"], jobs[2]["head_order"]);
  const Tokenizer tok = Tokenizer::load(tok_path);
  const double ppl =
      text_perplexity(*spd_model, tok, read_file(text, "t"), text, 0, 0, 8, {3}, false)
          .back()
          .ppl();
  double want = 0;
  for (const auto& row : rep["sweep"])
    if (row["variant"] == "+HG" && row["n"] == 2) want = row["ppl"];
  EXPECT_NEAR(ppl, want, 1e-9 * want);
  // The untouched block keeps the original weights.
  const int rest = ranking[2];
  EXPECT_EQ(spd::layer_snapshot(*spd_model, rest), spd::layer_snapshot(m, rest));
  EXPECT_NE(spd::layer_snapshot(*spd_model, ranking[0]), spd::layer_snapshot(m, ranking[0]));
  // Another degree than the blocks were distilled for is flagged.
  ::testing::internal::CaptureStderr();
  LoadOptions other_degree;
  other_degree.plan = spd_plan_text(3, on, 4);
  load_model(out + "/spd.h5", nullptr, other_degree);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("distilled for spd_degree 2"),
            std::string::npos);
  // Other calibration settings in the same directory are refused.
  {
    std::string r2 = read_file(recipe, "r");
    r2.replace(r2.find("samples = 3"), 11, "samples = 4");
    write_file_atomic(recipe, r2);
    EXPECT_ERROR(run_spd({recipe, "--quiet"}), "holds results of other settings");
  }
}

}  // namespace
}  // namespace strata
