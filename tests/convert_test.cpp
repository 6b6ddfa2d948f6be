// Hugging Face conversion: import against transformers' own logits (fixtures
// made once by tests/fixtures/make_hf_fixtures.py), round trips in both
// directions, sharding and dtypes, Llama-3 RoPE scaling, and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/gemm.h"
#include "core/error.h"
#include "core/file.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "testing.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string fixture(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path, "json"));
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

// Logits of the imported model on the fixture's input, against transformers'.
void expect_fixture_logits(const std::string& name, double tol) {
  HfImportInfo info;
  auto m = import_hf(fixture(name), &info);
  const auto expected = read_json(fixture(name) + "/expected.json");
  const std::vector<int32_t> ids = expected["input_ids"].get<std::vector<int32_t>>();
  const int T = int(ids.size()), V = m->config().vocab_size;
  std::vector<float> logits(size_t(T) * V);
  m->forward_logits(ids.data(), 1, T, logits.data());
  double worst = 0;
  for (int t = 0; t < T; ++t)
    for (int v = 0; v < V; ++v)
      worst = std::max(worst, std::fabs(double(logits[size_t(t) * V + v]) -
                                        expected["logits"][t][v].get<double>()));
  EXPECT_LT(worst, tol) << name << ": max |strata - transformers| logit difference";
  EXPECT_FALSE(info.tokenizer.empty());
}

TEST(HfImport, GqaUntiedF32MatchesTransformers) { expect_fixture_logits("hf_gqa_untied", 1e-4); }

TEST(HfImport, Llama3RopeTiedBf16MatchesTransformers) {
  const auto m = import_hf(fixture("hf_llama3_tied"));
  EXPECT_EQ(m->config().rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(m->config().rope_theta, 500000.0);
  EXPECT_TRUE(m->config().tie_word_embeddings);
  expect_fixture_logits("hf_llama3_tied", 1e-4);
}

// The Llama-3 frequencies against the formula written out independently.
TEST(HfImport, Llama3InvFreqFormula) {
  LlamaConfig c;
  c.hidden_size = 256;
  c.num_attention_heads = 2;  // head_dim 128
  c.vocab_size = 8;
  c.intermediate_size = 8;
  c.num_hidden_layers = 1;
  c.rope_theta = 500000;
  c.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
  c.finalize();
  const auto f = c.rope_inv_freq();
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * M_PI / base;
    double want;
    if (wavelen < 8192.0 / 4.0)
      want = base;
    else if (wavelen > 8192.0 / 1.0)
      want = base / 8.0;
    else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * base / 8.0 + smooth * base;
    }
    EXPECT_NEAR(f[i], want, 1e-15 * want) << i;
  }
  EXPECT_EQ(f[0], 1.0);                                             // highest frequency untouched
  EXPECT_NEAR(f[63], std::pow(500000.0, -126.0 / 128) / 8, 1e-20);  // lowest divided by factor
}

LlamaConfig random_config(bool tied, bool bias) {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 40;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  c.rope_theta = 20000;
  c.finalize();
  return c;
}

// strata -> HF -> strata: identical tensors and config, any shape of model.
TEST(HfRoundTrip, StrataToHfToStrataIsIdentical) {
  for (bool tied : {false, true})
    for (bool bias : {false, true})
      for (uint64_t shard : {uint64_t(1) << 30, uint64_t(20000)}) {
        TempDir dir;
        Model<float> m(random_config(tied, bias), ops::make_backend<float>());
        m.init_weights(3);
        auto noise = testing::random_vec<float>(m.num_params(), 5, 0.1);
        for (int64_t i = 0; i < m.num_params(); ++i) m.params()[i] += noise[i];
        HfExportOptions o;
        o.max_shard_bytes = shard;
        export_hf(m, "", dir.path(), o);
        EXPECT_EQ(fs::exists(dir / "model.safetensors.index.json"), shard < 100000);
        const auto cfg = read_json(dir / "config.json");
        EXPECT_EQ(cfg["strata"]["plan"], "standard*3");
        EXPECT_EQ(cfg["torch_dtype"], "float32");
        const auto back = import_hf(dir.path());
        EXPECT_EQ(back->config().to_json(), m.config().to_json());
        for (int64_t i = 0; i < m.num_params(); ++i)
          ASSERT_EQ(back->params()[i], m.params()[i]) << "tied " << tied << " bias " << bias;
      }
}

// HF -> strata -> HF: the exported safetensors hold the same tensors, bit for bit.
TEST(HfRoundTrip, HfToStrataToHfKeepsTensors) {
  TempDir dir;
  HfImportInfo info;
  auto m = import_hf(fixture("hf_gqa_untied"), &info);
  export_hf(*m, info.tokenizer, dir.path(), HfExportOptions{});
  const auto a = SafetensorsFile::open(fixture("hf_gqa_untied") + "/model.safetensors");
  const auto b = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const auto& t : a->tensors()) {
    const SafeTensorInfo* u = b->find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    std::vector<float> x(t.numel()), y(u->numel());
    a->read_f32(t, x.data());
    b->read_f32(*u, y.data());
    EXPECT_EQ(x, y) << t.name;
  }
  EXPECT_EQ(read_file(dir / "tokenizer.model", "t"),
            read_file(fixture("hf_gqa_untied") + "/tokenizer.model", "t"));
  EXPECT_EQ(read_json(dir / "generation_config.json")["eos_token_id"], 2);
}

TEST(HfExport, Bf16AndF16Weights) {
  TempDir dir;
  Model<float> m(random_config(false, false), ops::make_backend<float>());
  m.init_weights(9);
  for (const char* dtype : {"BF16", "F16"}) {
    HfExportOptions o;
    o.dtype = dtype;
    export_hf(m, "", dir.path(), o);
    const auto f = SafetensorsFile::open(dir / "model.safetensors");
    for (const auto& t : f->tensors()) EXPECT_EQ(t.dtype, dtype) << t.name;
    const auto back = import_hf(dir.path());
    double worst = 0;
    for (int64_t i = 0; i < m.num_params(); ++i) {
      const double x = m.params()[i], y = back->params()[i];
      worst = std::max(worst, std::fabs(x - y) / std::max(1e-3, std::fabs(x)));
    }
    EXPECT_LT(worst, std::string(dtype) == "BF16" ? 1.0 / 256 : 1.0 / 2048) << dtype;
    EXPECT_GT(worst, 0) << dtype << " export was exact: no conversion happened";
  }
  HfExportOptions bad;
  bad.dtype = "F64";
  EXPECT_THROW(export_hf(m, "", dir.path(), bad), Error);
}

// Bad directories give one-line errors naming the file and the tensor or field.
class HfImportErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(fixture("hf_gqa_untied"), dir_.path(), fs::copy_options::recursive);
  }
  void expect_error(const std::string& needle) {
    try {
      import_hf(dir_.path());
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  nlohmann::json config() { return read_json(dir_ / "config.json"); }
  TempDir dir_;
};

TEST_F(HfImportErrors, ShapeConfigMismatchNamesTheTensor) {
  auto c = config();
  c["intermediate_size"] = 160;
  write_json(dir_ / "config.json", c);
  expect_error("model.layers.0.mlp.gate_proj.weight");
}

TEST_F(HfImportErrors, MissingTensorNamesIt) {
  auto m = import_hf(dir_.path());
  std::vector<SafeTensorWrite> tensors;
  for (size_t i = 0; i < m->layout().tensors().size(); ++i) {
    const auto& t = m->layout()[int(i)];
    if (t.name != "model.layers.1.self_attn.k_proj.weight")
      tensors.push_back({t.name, t.shape, m->param(int(i))});
  }
  write_safetensors(dir_ / "model.safetensors", tensors, "F32");
  expect_error("model.layers.1.self_attn.k_proj.weight");
}

TEST_F(HfImportErrors, UnknownTensorMeansAnotherArchitecture) {
  auto m = import_hf(dir_.path());
  std::vector<SafeTensorWrite> tensors;
  for (size_t i = 0; i < m->layout().tensors().size(); ++i) {
    const auto& t = m->layout()[int(i)];
    tensors.push_back({t.name, t.shape, m->param(int(i))});
  }
  tensors.push_back({"model.layers.0.mlp.up_proj.bias", {176}, m->params()});
  write_safetensors(dir_ / "model.safetensors", tensors, "F32");
  expect_error("model.layers.0.mlp.up_proj.bias");
}

TEST_F(HfImportErrors, BadConfigFields) {
  const auto original = config();
  auto c = original;
  c["num_key_value_heads"] = 3;
  write_json(dir_ / "config.json", c);
  expect_error("num_key_value_heads");
  c = original;
  c["model_type"] = "mistral";
  write_json(dir_ / "config.json", c);
  expect_error("mistral");
  c = original;  // transformers 5 form
  c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
  write_json(dir_ / "config.json", c);
  expect_error("yarn");
  c = original;  // transformers 4 form
  c.erase("rope_parameters");
  c["rope_theta"] = 10000.0;
  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4.0}};
  write_json(dir_ / "config.json", c);
  expect_error("dynamic");
  std::ofstream(dir_ / "config.json") << "{not json";
  expect_error("config.json");
  fs::remove(dir_ / "config.json");
  expect_error("config.json");
}

TEST_F(HfImportErrors, TruncatedWeights) {
  const auto size = fs::file_size(dir_ / "model.safetensors");
  fs::resize_file(dir_ / "model.safetensors", size / 2);
  expect_error("model.safetensors");
}

}  // namespace
}  // namespace strata
