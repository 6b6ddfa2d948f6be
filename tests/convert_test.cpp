// Hugging Face conversion: import against transformers' own logits (fixtures
// made once by tests/fixtures/make_hf_fixtures.py), round trips in both
// directions, sharding and dtypes, Llama-3 RoPE scaling, and bad inputs; the
// exported tokenizer files against transformers 4.x and 5.x (recorded once by
// tests/fixtures/make_hf_tokenizer_fixture.py) and against sentencepiece
// (Hugging Face tokenizers' ids recorded by
// tests/fixtures/hf_export/make_export_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/cpu/gemm.h"
#include "core/error.h"
#include "core/file.h"
#include "core/sha256.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "io/checkpoint.h"
#include "io/hf.h"
#include "io/hf_tokenizer.h"
#include "io/llama2c.h"
#include "io/model_io.h"
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

// A Llama-3-shaped model (tied head, GQA, rope_theta 500000) with a
// byte-level BPE tokenizer.json and no tokenizer.model, as Llama 3 ships:
// HF -> strata checkpoint -> HF keeps the weights bit for bit and the
// tokenizer.json byte for byte, and the checkpoint's tokenizer encodes.
TEST(HfRoundTrip, Llama3ShapedModelWithTokenizerJsonBitForBit) {
  const std::string tj =
      read_file(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/bpe/llama3/tokenizer.json", "t");
  LlamaConfig c = random_config(true, false);
  c.vocab_size = 3000;
  c.rope_theta = 500000;
  c.finalize();
  TempDir a, b, ck;
  {
    Model<float> m(c, ops::make_backend<float>());
    m.init_weights(7);
    export_hf(m, tj, a.path(), HfExportOptions{});
  }
  EXPECT_FALSE(fs::exists(a / "tokenizer.model"));
  EXPECT_EQ(read_file(a / "tokenizer.json", "t"), tj);
  const auto tc = read_json(a / "tokenizer_config.json");
  EXPECT_EQ(tc["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(tc["eos_token"], "<|end_of_text|>");
  EXPECT_FALSE(tc.contains("add_bos_token"));  // the post-processor adds it

  HfImportInfo info;
  auto m = import_hf(a.path(), &info);
  EXPECT_EQ(info.tokenizer, tj);
  EXPECT_EQ(fs::path(info.tokenizer_file).filename(), "tokenizer.json");
  save_model(ck / "m.h5", *m, info.tokenizer, {{"step", 0}});
  CheckpointInfo ci;
  auto back = load_model(ck / "m.h5", &ci);
  const Tokenizer tok = Tokenizer::from_bytes(ci.tokenizer, "checkpoint");
  EXPECT_EQ(tok.kind(), Tokenizer::Kind::Bpe);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{44, 509, 83, 1038}));
  export_hf(*back, ci.tokenizer, b.path(), HfExportOptions{});
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json",
                        "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_EQ(read_file(a / f, "t"), read_file(b / f, "t")) << f;
}

// Llama 3.1 Instruct's config.json lists three EOS ids: the first is the
// EOS, the list comes back on export; a bad list is one line.
TEST(HfImport, EosTokenIdListIsKept) {
  nlohmann::json j = random_config(false, false).to_json();
  j["eos_token_id"] = {128001, 128008, 128009};
  j["vocab_size"] = 128256;
  const LlamaConfig c = LlamaConfig::from_json(j, "config.json");
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(c.more_eos_token_ids, (std::vector<int>{128008, 128009}));
  EXPECT_EQ(c.to_json()["eos_token_id"], j["eos_token_id"]);
  j["eos_token_id"] = {1, "x"};
  try {
    LlamaConfig::from_json(j, "config.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "config.json: field 'eos_token_id' has \"x\", not a token id");
  }
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

// ---------------------------------------------------------------------------
// Tokenizer files of the export.

const std::string kTok512 = std::string(STRATA_SOURCE_DIR) + "/data/tokenizers/tok512.model";

TEST(HfTokenizerExport, ParsesTheSentencepieceModel) {
  const std::string bytes = read_file(kTok512, "tokenizer");
  const SpModelInfo m = parse_sp_model(bytes, "tok512");
  const Tokenizer tok = Tokenizer::load(kTok512);
  ASSERT_EQ(int(m.pieces.size()), tok.vocab_size());
  for (int i = 0; i < tok.vocab_size(); ++i)
    EXPECT_EQ(m.pieces[size_t(i)].text, tok.id_to_piece(i));
  EXPECT_EQ(m.model_type, 2);  // llama2.c trained it as BPE
  EXPECT_TRUE(m.byte_fallback);
  EXPECT_TRUE(m.add_dummy_prefix);
  EXPECT_TRUE(m.remove_extra_whitespaces);
  using PT = SpModelInfo::PieceType;
  EXPECT_EQ(m.pieces[0].type, PT::Unknown);
  EXPECT_EQ(m.pieces[1].type, PT::Control);
  EXPECT_EQ(m.pieces[2].type, PT::Control);
  EXPECT_EQ(m.pieces[3].type, PT::Byte);  // <0x00>
  EXPECT_EQ(m.pieces[3].text, "<0x00>");
  EXPECT_EQ(m.pieces[259].type, PT::Normal);
  EXPECT_GT(m.pieces[259].score, m.pieces[300].score);  // BPE scores fall with the id
  // Not a model: one error naming it.
  testing::expect_one_line(
      testing::thrown_message([] { parse_sp_model(std::string("\x0a\xff\xff", 3), "junk.model"); }),
      {"junk.model", "not a sentencepiece model"});
  testing::expect_one_line(testing::thrown_message([] { parse_sp_model("", "empty.model"); }),
                           {"empty.model", "no pieces"});
}

// Hugging Face's BPE, written out here: the normalizer the export describes
// for tok512 (strip, collapse spaces, one leading U+2581, U+2581 for spaces),
// then the ranked merges applied lowest rank first (leftmost on
// ties), then pieces missing from the vocabulary as <0xNN> bytes. Its ids must
// be sentencepiece's.
std::vector<int32_t> hf_bpe(const std::string& text, const nlohmann::json& model) {
  std::string t = text;
  while (!t.empty() && t.front() == ' ') t.erase(t.begin());
  while (!t.empty() && t.back() == ' ') t.pop_back();
  std::string norm;
  for (char c : t)
    if (!(c == ' ' && !norm.empty() && norm.back() == ' ')) norm += c;
  if (norm.empty()) return {};
  std::string s = "\xe2\x96\x81";
  for (char c : norm) s += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
  std::vector<std::string> sym;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (uint8_t(s[i + n]) & 0xc0) == 0x80) ++n;
    sym.push_back(s.substr(i, n));
    i += n;
  }
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t r = 0; r < model["merges"].size(); ++r)
    rank.emplace(model["merges"][r].get<std::pair<std::string, std::string>>(), r);
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find({sym[i], sym[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + long(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& p : sym) {
    if (model["vocab"].contains(p)) {
      ids.push_back(model["vocab"][p].get<int32_t>());
      continue;
    }
    for (unsigned char c : p) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", c);
      ids.push_back(model["vocab"][name].get<int32_t>());
    }
  }
  return ids;
}

TEST(HfTokenizerExport, MergesReproduceSentencepieceOnTheCorpus) {
  const Tokenizer tok = Tokenizer::load(kTok512);
  const auto files = make_hf_tokenizer_files(tok.model_bytes(), 512, "tok512");
  const auto tj = nlohmann::json::parse(files.tokenizer_json);
  const auto& model = tj["model"];
  ASSERT_EQ(model["type"], "BPE");
  EXPECT_EQ(model["vocab"].size(), 512u);
  EXPECT_EQ(model["merges"].size(), 165u);  // as transformers' own converter finds
  EXPECT_EQ(tj["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  std::ifstream in(std::string(STRATA_SOURCE_DIR) +
                   "/data/corpora/tinystories/tinystories_sample.txt");
  std::string line;
  int lines = 0;
  int64_t tokens = 0;
  while (std::getline(in, line)) {
    const std::vector<int32_t> want = tok.encode(line);
    ASSERT_EQ(hf_bpe(line, model), want) << "line " << lines + 1 << ": " << line;
    ++lines, tokens += int64_t(want.size());
  }
  EXPECT_GT(lines, 10);
  EXPECT_GT(tokens, 1000);
  for (const char* s : {"  two  spaces  ", "caf\xc3\xa9 \xe4\xbd\xa0", "a\n\nb", "tab\tx"})
    EXPECT_EQ(hf_bpe(s, model), tok.encode(s)) << s;
}

// tests/fixtures/hf_export/sp_export_ids.json: texts on which Hugging Face's
// tokenizers, given the tokenizer.json `strata export hf` wrote for a
// sentencepiece model, gave that model's ids (python sentencepiece's, which
// make_export_fixtures.py checked before writing). The export must still write
// that very tokenizer.json, and strata's own sentencepiece tokenizer must give
// the recorded ids: together, the exported tokenizer equals sentencepiece on
// every text.
void expect_export_matches_sentencepiece(const std::string& name) {
  static const nlohmann::json fx = read_json(fixture("hf_export/sp_export_ids.json"));
  ASSERT_TRUE(fx["tokenizers"].contains(name)) << name;
  const auto& e = fx["tokenizers"][name];
  const std::string source = std::string(STRATA_SOURCE_DIR) + "/" + e["source"].get<std::string>();
  const std::string bytes = source.ends_with(".h5") ? CheckpointReader(source).tokenizer()
                                                    : read_file(source, "tokenizer");
  const HfTokenizerFiles files = make_hf_tokenizer_files(bytes, 256, name);
  const auto tj = nlohmann::json::parse(files.tokenizer_json);
  // The readable part of the recording first, then the whole file.
  EXPECT_EQ(tj["pre_tokenizer"], e["hf_pre_tokenizer"]) << name;
  EXPECT_EQ(tj["decoder"]["decoders"], e["hf_decoder"]) << name;
  auto normalizers = tj["normalizer"]["normalizers"];
  for (auto& n : normalizers)
    if (n["type"] == "Precompiled") n["precompiled_charsmap"] = "...";
  EXPECT_EQ(normalizers, e["hf_normalizer"]) << name;
  ASSERT_EQ(sha256_hex(files.tokenizer_json), e["tokenizer_json_sha256"].get<std::string>())
      << name << ": the export no longer writes the tokenizer.json the fixture was made from: "
      << "rerun tests/fixtures/hf_export/make_export_fixtures.py";

  const Tokenizer tok = Tokenizer::from_bytes(bytes, name);
  const auto& texts = fx["texts"];
  std::vector<size_t> which(texts.size());
  for (size_t i = 0; i < which.size(); ++i) which[i] = i;
  if (e.contains("texts")) which = e["texts"].get<std::vector<size_t>>();
  ASSERT_EQ(which.size(), e["ids"].size()) << name;
  int wrong = 0;
  for (size_t k = 0; k < which.size() && wrong < 10; ++k) {
    const std::string text = texts[which[k]].get<std::string>();
    const auto want = e["ids"][k].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text);
    if (got != want) {
      ++wrong;
      ADD_FAILURE() << name << ": text " << which[k] << " " << nlohmann::json(text).dump()
                    << ": strata " << nlohmann::json(got).dump() << ", the fixture "
                    << nlohmann::json(want).dump();
    }
  }
  EXPECT_GE(which.size(), 300u);
}

// BPE, add_dummy_prefix without remove_extra_whitespaces: the audit's case,
// " Robert" is [▁, ▁Robert].
TEST(HfTokenizerExport, MatchesSentencepieceQuickstart) {
  expect_export_matches_sentencepiece("quickstart");
}

// BPE, add_dummy_prefix and remove_extra_whitespaces.
TEST(HfTokenizerExport, MatchesSentencepieceStories260K) {
  expect_export_matches_sentencepiece("stories260K");
}

// Unigram with each (add_dummy_prefix, remove_extra_whitespaces) pair and BPE
// without the dummy prefix; small models trained for the fixture, some with a
// character map (tests/fixtures/hf_export/rules.tsv), some without byte fallback.
TEST(HfTokenizerExport, MatchesSentencepieceOtherNormalizerSettings) {
  for (const char* name : {"unigram_dummy_strip", "unigram_dummy_keep", "unigram_nodummy_strip",
                           "unigram_nodummy_keep", "bpe_nodummy_strip", "bpe_nodummy_keep"})
    expect_export_matches_sentencepiece(name);
}

std::unique_ptr<Model<float>> stories260k() {
  const Llama2cModel m =
      read_llama2c(std::string(STRATA_SOURCE_DIR) + "/data/models/stories260K/stories260K.bin");
  auto model = std::make_unique<Model<float>>(m.config, ops::make_backend<float>());
  for (const auto& [name, data] : m.tensors)
    std::copy(data.begin(), data.end(), model->param(model->layout().find(name)));
  return model;
}

// transformers 4.x and 5.x, given the exported directory of stories260K,
// encode, decode, render the chat template and decode greedily as strata does.
TEST(HfTokenizerExport, TransformersReproducesStrata) {
  const auto fixture_all = read_json(fixture("hf_tokenizer_expected.json"));
  ASSERT_TRUE(fixture_all.contains("transformers_4"));
  ASSERT_TRUE(fixture_all.contains("transformers_5"));
  const Tokenizer tok = Tokenizer::load(kTok512);
  auto model = stories260k();
  TempDir dir;
  export_hf(*model, tok.model_bytes(), dir.path(), HfExportOptions{});
  for (const auto& [version, fx] : fixture_all.items()) {
    SCOPED_TRACE(version + " (" + fx["transformers"].get<std::string>() + ")");
    // The recording was made from these very files.
    for (const auto& [file, digest] : fx["files"].items())
      EXPECT_EQ(sha256_hex(read_file(dir / file, "export")), digest.get<std::string>())
          << file << " differs from the exported file transformers was run on: rerun "
          << "tests/fixtures/make_hf_tokenizer_fixture.py with transformers 4.x and 5.x";
    const auto texts = fx["texts"].get<std::vector<std::string>>();
    ASSERT_EQ(texts.size(), fx["ids"].size());
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<int32_t> want = {tok.bos_id()};
      for (int32_t id : tok.encode(texts[i])) want.push_back(id);
      EXPECT_EQ(fx["ids"][i].get<std::vector<int32_t>>(), want) << texts[i];
      EXPECT_EQ(fx["decoded"][i].get<std::string>(), tok.decode(tok.encode(texts[i])));
    }
    // The chat template renders the text SFT trains on: BOS, prefix +
    // content + suffix per message, EOS after the assistant's.
    const ChatTemplate t;
    const auto& chat = fx["chat"];
    std::string text = "<s>";
    for (const auto& msg : chat["messages"]) {
      const std::string role = msg["role"], content = msg["content"];
      if (role == "system") text += t.system_prefix + content + t.system_suffix;
      if (role == "user") text += t.user_prefix + content + t.user_suffix;
      if (role == "assistant") text += t.assistant_prefix + content + t.assistant_suffix + "</s>";
    }
    EXPECT_EQ(chat["text"].get<std::string>(), text);
    const std::string prompt = "<s>" + t.system_prefix + "Be kind." + t.system_suffix +
                               t.user_prefix + "Tell me a story." + t.user_suffix +
                               t.assistant_prefix;
    EXPECT_EQ(chat["generation_prompt"].get<std::string>(), prompt);
    // Greedy decoding of the exported model, against strata's.
    std::vector<int32_t> ids = {tok.bos_id()};
    for (int32_t id : tok.encode(fx["greedy_prompt"].get<std::string>())) ids.push_back(id);
    const auto want = fx["greedy_ids"].get<std::vector<int32_t>>();
    GenerateOptions o;
    o.max_new_tokens = int(want.size());
    o.sampling.temperature = 0;
    EXPECT_EQ(generate_simple(*model, ids, o), want);
  }
  // The config files name the special tokens and the format.
  const auto cfg = read_json(dir / "config.json");
  EXPECT_TRUE(cfg["pad_token_id"].is_null());  // tok512 has no pad piece
  EXPECT_EQ(cfg["transformers_version"], "4.57.6");
  EXPECT_EQ(read_json(dir / "generation_config.json")["pad_token_id"], 2);
  const auto tc = read_json(dir / "tokenizer_config.json");
  EXPECT_EQ(tc["bos_token"], "<s>");
  EXPECT_EQ(tc["eos_token"], "</s>");
  EXPECT_EQ(tc["unk_token"], "<unk>");
  EXPECT_EQ(tc["add_bos_token"], true);
  EXPECT_EQ(tc["model_max_length"], 512);
  EXPECT_EQ(read_json(dir / "special_tokens_map.json")["eos_token"], "</s>");
}

// A unigram model (strata tokenizer train --model-type unigram) exports with
// its scores, and its pad piece where it has one.
TEST(HfTokenizerExport, UnigramModel) {
  TempDir dir;
  TokenizerTrainOptions o;
  o.inputs = {std::string(STRATA_SOURCE_DIR) + "/data/corpora/tinystories/tinystories_sample.txt"};
  o.out = dir / "u.model";
  o.vocab_size = 400;
  o.model_type = "unigram";
  const Tokenizer tok = train_tokenizer(o);
  const auto files = make_hf_tokenizer_files(tok.model_bytes(), 256, "u.model");
  const auto tj = nlohmann::json::parse(files.tokenizer_json);
  ASSERT_EQ(tj["model"]["type"], "Unigram");
  ASSERT_EQ(int(tj["model"]["vocab"].size()), tok.vocab_size());
  EXPECT_EQ(tj["model"]["unk_id"], tok.unk_id());
  const SpModelInfo m = parse_sp_model(tok.model_bytes(), "u.model");
  for (int i = 0; i < tok.vocab_size(); ++i) {
    EXPECT_EQ(tj["model"]["vocab"][size_t(i)][0], tok.id_to_piece(i));
    EXPECT_FLOAT_EQ(tj["model"]["vocab"][size_t(i)][1].get<float>(), m.pieces[size_t(i)].score);
  }
  EXPECT_EQ(files.pad_token_id, -1);
}

}  // namespace
}  // namespace strata
