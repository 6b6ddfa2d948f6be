// The models shipped in checkpoints/ (see checkpoints/MANIFEST.md): their
// checksums, and that each one does what the docs use it for (docs/checkpoints.md, "Shipped
// models"): stories260K decodes as llama2.c's run.c does, the quickstart and LayerSkip quickstart
// models (bf16 weights) model Austen's text, the LayerSkip model's early exits
// are far better than the baseline's, and self-speculation on it gives the
// plain greedy text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/sha256.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "infer/generate.h"
#include "io/checkpoint.h"
#include "io/model_io.h"
#include "manifest.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
const std::string kSource = STRATA_SOURCE_DIR;
const std::string kCkpt = kSource + "/checkpoints/";

TEST(ShippedCheckpoints, ManifestChecksums) {
  const auto rows =
      testing::manifest_checksums(kCkpt + "MANIFEST.md", "file (relative to checkpoints/)");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& [name, sha] : rows) {
    const std::string file = kCkpt + name;
    ASSERT_TRUE(fs::is_regular_file(file)) << file;
    EXPECT_EQ(sha256_hex(read_file(file, "checkpoint")), sha) << file;
  }
}

TEST(ShippedCheckpoints, Stories260KDecodesAsRunC) {
  CheckpointInfo info;
  auto model = load_model(kCkpt + "stories260K.h5", &info);
  const auto ref = nlohmann::json::parse(
      read_file(kSource + "/tests/fixtures/stories260K_reference.json", "fixture"));
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, "stories260K.h5");
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(prompt[0], tok.bos_id());
  const auto want = ref["greedy_ids"].get<std::vector<int32_t>>();
  GenerateOptions o;
  o.max_new_tokens = int(want.size());
  o.sampling.temperature = 0;
  EXPECT_EQ(generate_simple(*model, prompt, o), want);
  EXPECT_EQ(CheckpointReader(kCkpt + "stories260K.h5").params_dtype(), "float32");
}

// Perplexity of the first 24 KB of Persuasion at every exit.
std::vector<double> persuasion_ppl(const std::string& ckpt) {
  CheckpointInfo info;
  auto model = load_model(ckpt, &info);
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, ckpt);
  const std::string text =
      read_file(kSource + "/data/corpora/janeausten/persuasion.txt", "text").substr(0, 24000);
  std::vector<int> exits;
  for (int e = 1; e <= model->config().num_hidden_layers; ++e) exits.push_back(e);
  std::vector<double> ppl;
  for (const auto& r : text_perplexity(*model, tok, text, "persuasion", 256, 255, 8, exits, false))
    ppl.push_back(r.ppl());
  return ppl;
}

TEST(ShippedCheckpoints, QuickstartModelsAndTheLayerSkipEffect) {
  for (const char* name : {"quickstart.h5", "layerskip-quickstart.h5"}) {
    CheckpointReader r(kCkpt + name);
    EXPECT_EQ(r.params_dtype(), "bfloat16") << name;
    EXPECT_FALSE(r.has_optimizer()) << name;
    EXPECT_EQ(r.plan(), "standard*6") << name;
  }
  const auto base = persuasion_ppl(kCkpt + "quickstart.h5");
  const auto ls = persuasion_ppl(kCkpt + "layerskip-quickstart.h5");
  ASSERT_EQ(base.size(), 6u);
  ASSERT_EQ(ls.size(), 6u);
  for (size_t e = 0; e < 6; ++e)
    std::printf("exit %zu: perplexity %.2f (quickstart) %.2f (LayerSkip)\n", e + 1, base[e], ls[e]);
  // Both model the text (a uniform guess over 4096 pieces is 4096).
  EXPECT_LT(base[5], 110);
  EXPECT_LT(ls[5], 110);
  // LayerSkip's final layer is as good as the baseline's (within 5%), and its
  // early exits are far better: the paper's effect (exits 1-3).
  EXPECT_LT(ls[5], base[5] * 1.05);
  for (size_t e = 0; e < 3; ++e) EXPECT_LT(ls[e], base[e] * 0.75) << "exit " << e + 1;
}

TEST(ShippedCheckpoints, SelfSpeculationOnTheLayerSkipModelIsTheGreedyText) {
  CheckpointInfo info;
  auto model = load_model(kCkpt + "layerskip-quickstart.h5", &info);
  const Tokenizer tok = Tokenizer::from_bytes(info.tokenizer, "layerskip-quickstart.h5");
  std::vector<int32_t> prompt = {tok.bos_id()};
  for (int32_t t : tok.encode("It is a truth universally acknowledged")) prompt.push_back(t);
  GenerateOptions plain;
  plain.max_new_tokens = 48;
  plain.sampling.temperature = 0;
  const auto want = generate(*model, prompt, plain);
  GenerateOptions spec = plain;
  spec.exit_layer = 3;
  spec.speculations = 4;
  GenerateStats stats;
  EXPECT_EQ(generate(*model, prompt, spec, {}, &stats), want);
  EXPECT_GT(stats.acceptance(), 0.2);  // the early exit drafts usefully (0.28 measured)
}

}  // namespace
}  // namespace strata
