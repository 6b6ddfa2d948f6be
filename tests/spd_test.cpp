// The spd kind (SPD, Sync-Point Drop): plan rules, every stream of SPD and
// hybrid plans at degree 2 and 4 against a double reference of the per-device
// maths built from explicitly sliced weights (tests/plan_reference.h), with
// and without the o_proj bias; degree 1 is the standard layer bitwise; KV-cache
// generation. Gradients: tests/model_grad_test.cpp; real tensor parallelism
// against the simulation: tests/mpi_model_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "io/model_io.h"
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

// `strata spd scan`: PPL_L is the standard perplexity, every S_k follows from
// the perplexities it was computed from, the ranking orders the blocks by S,
// and the budget's ends are the scan's ends (none / all blocks in SPD).
TEST(Spd, ScanIsConsistent) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "strata_spd_scan_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  LlamaConfig c = spd_config(3, 4, false);
  c.vocab_size = 512;
  c.finalize();
  Model<float> m(c, LayerPlan::standard(3), ops::make_backend<float>());
  m.init_weights(13);
  const std::string tok_path = std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model";
  const std::string ckpt = (dir / "m.h5").string(), text = (dir / "t.txt").string();
  save_model(ckpt, m, read_file(tok_path, "tokenizer"), nlohmann::json::object());
  write_file_atomic(text,
                    "Once upon a time there was a little dog. It liked to run in the park "
                    "with its friend, a big cat who did not like to run at all.\n");
  const std::string out = (dir / "scan.json").string();
  std::vector<std::string> a = {"strata", "spd",      "scan", "--checkpoint", ckpt, "--text",
                                text,     "--degree", "4",    "--window",     "16", "--out",
                                out,      "--quiet"};
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  ASSERT_EQ(cli::cmd_spd(int(argv.size()), argv.data(), 2), 0);
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
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
