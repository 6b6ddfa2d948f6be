// llama2.c model files: both layouts, the q/k permutation, errors, and the
// stories260K model against numbers computed by the original llama2.c run.c
// (tests/fixtures/stories260K_reference.json; tests/fixtures/README.md says
// how they were made).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "io/llama2c.h"
#include "model/model.h"
#include "model/params.h"
#include "ops/backend.h"
#include "testing.h"

namespace strata {
namespace {

const std::string kSource = STRATA_SOURCE_DIR;
const std::string kLegacy = kSource + "/data/models/stories260K/stories260K.bin";
const std::string kV1 = kSource + "/data/models/stories260K/stories260K_v1.bin";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

const nlohmann::json& fixture() {
  static const nlohmann::json j =
      nlohmann::json::parse(slurp(kSource + "/tests/fixtures/stories260K_reference.json"));
  return j;
}

// Expects fn() to throw strata::Error with a one-line message containing every
// one of `parts`.
template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << parts[0];
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------
// A writer of llama2.c files from strata-layout tensors (the test's own,
// independent of the reader).

struct TinyShape {
  int dim = 16, hidden = 24, layers = 2, heads = 4, kv_heads = 2, vocab = 11, seq_len = 7;
};

LlamaConfig tiny_config(const TinyShape& s, bool shared) {
  LlamaConfig c;
  c.vocab_size = s.vocab;
  c.hidden_size = s.dim;
  c.intermediate_size = s.hidden;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.max_position_embeddings = s.seq_len;
  c.tie_word_embeddings = shared;
  c.finalize("tiny");
  return c;
}

using Tensors = std::map<std::string, std::vector<float>>;

// Strata (rotate-half) rows -> llama2.c (interleaved) rows: within each head of
// D rows, llama2.c row 2i is strata row i and llama2.c row 2i+1 is strata row
// i + D/2.
std::vector<float> to_interleaved(const std::vector<float>& w, int heads, int cols) {
  const int rows = int(w.size()) / cols, D = rows / heads;
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < D / 2; ++i)
      for (int c = 0; c < cols; ++c) {
        out[size_t((h * D + 2 * i) * cols + c)] = w[size_t((h * D + i) * cols + c)];
        out[size_t((h * D + 2 * i + 1) * cols + c)] = w[size_t((h * D + D / 2 + i) * cols + c)];
      }
  return out;
}

std::string file_bytes(const TinyShape& s, const Tensors& t, int version, bool shared) {
  std::string out;
  auto put_i32 = [&](int32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  auto put = [&](const std::vector<float>& v) {
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  auto layer = [&](const std::string& suffix) {
    for (int l = 0; l < s.layers; ++l)
      put(t.at("model.layers." + std::to_string(l) + "." + suffix));
  };
  auto qk = [&](const std::string& which, int heads) {
    for (int l = 0; l < s.layers; ++l)
      put(to_interleaved(t.at("model.layers." + std::to_string(l) + ".self_attn." + which), heads,
                         s.dim));
  };
  auto config = [&](int vocab) {
    for (int v : {s.dim, s.hidden, s.layers, s.heads, s.kv_heads, vocab, s.seq_len}) put_i32(v);
  };
  if (version == 0) {
    config(shared ? s.vocab : -s.vocab);
    put(t.at("model.embed_tokens.weight"));
    layer("input_layernorm.weight");
    qk("q_proj.weight", s.heads);
    qk("k_proj.weight", s.kv_heads);
    layer("self_attn.v_proj.weight");
    layer("self_attn.o_proj.weight");
    layer("post_attention_layernorm.weight");
    layer("mlp.gate_proj.weight");
    layer("mlp.down_proj.weight");
    layer("mlp.up_proj.weight");
    put(t.at("model.norm.weight"));
    // freq_cis tables: values the reader must skip.
    put(std::vector<float>(size_t(s.seq_len * (s.dim / s.heads / 2) * 2), 12345.0f));
  } else {
    put_i32(0x616b3432);
    put_i32(1);
    config(s.vocab);
    out.push_back(char(shared ? 1 : 0));
    out.resize(256, '\0');
    layer("input_layernorm.weight");
    layer("post_attention_layernorm.weight");
    put(t.at("model.norm.weight"));
    put(t.at("model.embed_tokens.weight"));
    qk("q_proj.weight", s.heads);
    qk("k_proj.weight", s.kv_heads);
    layer("self_attn.v_proj.weight");
    layer("self_attn.o_proj.weight");
    layer("mlp.gate_proj.weight");
    layer("mlp.down_proj.weight");
    layer("mlp.up_proj.weight");
  }
  if (!shared) put(t.at("lm_head.weight"));
  return out;
}

Tensors random_tensors(const LlamaConfig& c) {
  Tensors t;
  const ParamLayout layout(c);
  uint32_t stream = 0;
  for (const auto& info : layout.tensors())
    t[info.name] = testing::random_vec<float>(info.numel, stream++);
  return t;
}

// ---------------------------------------------------------------------------

TEST(Llama2c, PermutationOfOneHead) {
  // One layer, one head of D = 4 rows, dim 4: the llama2.c q rows r0 r1 r2 r3
  // (pairs (r0, r1), (r2, r3)) become r0 r2 r1 r3 in the rotate-half layout.
  TinyShape s{
      .dim = 4, .hidden = 2, .layers = 1, .heads = 1, .kv_heads = 1, .vocab = 3, .seq_len = 2};
  const LlamaConfig c = tiny_config(s, true);
  Tensors t = random_tensors(c);
  testing::TempDir dir;
  // Write q in llama2.c order directly: row r is filled with the value r.
  std::vector<float> q_llama(16);
  for (int r = 0; r < 4; ++r)
    for (int col = 0; col < 4; ++col) q_llama[size_t(r * 4 + col)] = float(r);
  // file_bytes() interleaves strata rows, so give it the strata rows r0 r2 r1 r3.
  std::vector<float> q_strata(16);
  const int order[4] = {0, 2, 1, 3};
  for (int r = 0; r < 4; ++r)
    for (int col = 0; col < 4; ++col) q_strata[size_t(r * 4 + col)] = float(order[r]);
  EXPECT_EQ(to_interleaved(q_strata, 1, 4), q_llama);
  t["model.layers.0.self_attn.q_proj.weight"] = q_strata;
  write_bytes(dir / "m.bin", file_bytes(s, t, 0, true));
  const Llama2cModel m = read_llama2c(dir / "m.bin");
  for (const auto& [name, data] : m.tensors)
    if (name == "model.layers.0.self_attn.q_proj.weight") {
      for (int r = 0; r < 4; ++r) EXPECT_EQ(data[size_t(r * 4)], float(order[r])) << "row " << r;
    }
}

TEST(Llama2c, TinyFilesInBothLayouts) {
  const TinyShape s;  // dim 16, 4 heads of 4, 2 kv heads (GQA), vocab 11
  for (int version : {0, 1})
    for (bool shared : {true, false}) {
      SCOPED_TRACE("version " + std::to_string(version) + (shared ? " shared" : " unshared"));
      const LlamaConfig c = tiny_config(s, shared);
      const Tensors t = random_tensors(c);
      testing::TempDir dir;
      const std::string path = dir / "tiny.bin";
      write_bytes(path, file_bytes(s, t, version, shared));
      const Llama2cModel m = read_llama2c(path);
      EXPECT_EQ(m.version, version);
      EXPECT_EQ(m.shared_classifier, shared);
      EXPECT_EQ(m.config.to_json(), c.to_json());
      EXPECT_EQ(m.config.tie_word_embeddings, shared);
      EXPECT_EQ(m.config.num_key_value_heads, 2);
      EXPECT_EQ(m.config.head_dim, 4);
      EXPECT_EQ(m.config.max_position_embeddings, 7);
      const ParamLayout layout(c);
      ASSERT_EQ(m.tensors.size(), layout.tensors().size());
      for (size_t i = 0; i < m.tensors.size(); ++i) {
        const auto& [name, data] = m.tensors[i];
        EXPECT_EQ(name, layout[int(i)].name);
        ASSERT_EQ(int64_t(data.size()), layout[int(i)].numel) << name;
        EXPECT_EQ(0, std::memcmp(data.data(), t.at(name).data(), data.size() * 4)) << name;
      }
      EXPECT_EQ(layout.find("lm_head.weight") >= 0, !shared);
    }
}

TEST(Llama2c, Stories260KConfig) {
  const Llama2cModel m = read_llama2c(kLegacy);
  EXPECT_EQ(m.version, 0);
  EXPECT_TRUE(m.shared_classifier);
  const LlamaConfig& c = m.config;
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(m.tensors.size(), size_t(1 + 5 * 9 + 1));
  EXPECT_EQ(c.num_parameters(),
            512 * 64 + 5 * (2 * 64 + 64 * 64 * 2 + 32 * 64 * 2 + 3 * 172 * 64) + 64);
}

TEST(Llama2c, Stories260KLegacyAndV1AreIdentical) {
  const Llama2cModel a = read_llama2c(kLegacy), b = read_llama2c(kV1);
  EXPECT_EQ(a.version, 0);
  EXPECT_EQ(b.version, 1);
  EXPECT_EQ(a.shared_classifier, b.shared_classifier);
  EXPECT_EQ(a.config.to_json(), b.config.to_json());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    ASSERT_EQ(a.tensors[i].second.size(), b.tensors[i].second.size());
    EXPECT_EQ(0, std::memcmp(a.tensors[i].second.data(), b.tensors[i].second.data(),
                             a.tensors[i].second.size() * 4))
        << a.tensors[i].first;
  }
}

TEST(Llama2c, Errors) {
  testing::TempDir dir;
  const std::string good = slurp(kLegacy), good_v1 = slurp(kV1);
  const std::string missing = dir / "missing.bin";
  expect_error([&] { read_llama2c(missing); }, {missing, "no such file"});

  const std::string truncated = dir / "truncated.bin";
  write_bytes(truncated, good.substr(0, good.size() - 4));
  expect_error([&] { read_llama2c(truncated); },
               {truncated, "1056536 bytes, expected 1056540", "truncated"});

  const std::string oversized = dir / "oversized.bin";
  write_bytes(oversized, good + std::string(4, '\0'));
  expect_error([&] { read_llama2c(oversized); }, {oversized, "1056544 bytes, expected 1056540"});

  const std::string v1_cut = dir / "v1_cut.bin";
  write_bytes(v1_cut, good_v1.substr(0, good_v1.size() - 1000));
  expect_error([&] { read_llama2c(v1_cut); }, {v1_cut, "version-1", "expected 1040384"});

  const std::string empty = dir / "empty.bin";
  write_bytes(empty, "");
  expect_error([&] { read_llama2c(empty); }, {empty, "too short"});

  const std::string short_v1 = dir / "short_v1.bin";
  write_bytes(short_v1, good_v1.substr(0, 100));
  expect_error([&] { read_llama2c(short_v1); }, {short_v1, "too short", "256-byte"});

  std::string v2 = good_v1;
  v2[4] = 2;
  const std::string q80 = dir / "q80.bin";
  write_bytes(q80, v2);
  expect_error([&] { read_llama2c(q80); }, {q80, "unsupported llama2.c version 2"});

  std::string bad_flag = good_v1;
  bad_flag[36] = 7;
  const std::string flag = dir / "flag.bin";
  write_bytes(flag, bad_flag);
  expect_error([&] { read_llama2c(flag); }, {flag, "shared-classifier flag"});

  // Text and random bytes.
  const std::string text = dir / "text.bin";
  write_bytes(text, slurp(kSource + "/data/corpora/tinystories/tinystories_sample.txt"));
  expect_error([&] { read_llama2c(text); }, {text, "not a legacy llama2.c file?"});
  const auto noise = testing::random_vec<float>(4096, 5, 1e9);
  const std::string garbage = dir / "garbage.bin";
  write_bytes(garbage, std::string(reinterpret_cast<const char*>(noise.data()), noise.size() * 4));
  expect_error([&] { read_llama2c(garbage); }, {garbage});

  // A header whose sizes overflow int64.
  std::string huge(28, '\0');
  const int32_t words[7] = {2147483644, 2147483647, 2147483647, 2, 2, 2147483647, 2147483647};
  std::memcpy(huge.data(), words, 28);
  const std::string overflow = dir / "overflow.bin";
  write_bytes(overflow, huge);
  expect_error([&] { read_llama2c(overflow); }, {overflow, "overflow"});

  // A header with 2^31 - 1 layers: rejected by its size, before anything is allocated.
  std::string many(good.substr(0, 28));
  const int32_t n_layers = 2147483647;
  std::memcpy(many.data() + 8, &n_layers, 4);
  const std::string many_layers = dir / "many_layers.bin";
  write_bytes(many_layers, many);
  expect_error([&] { read_llama2c(many_layers); }, {many_layers, "28 bytes, expected"});

  const std::string odd_heads = dir / "odd_heads.bin";
  std::string bad_heads = good;
  const int32_t three = 3;
  std::memcpy(bad_heads.data() + 12, &three, 4);  // n_heads 3 does not divide dim 64
  write_bytes(odd_heads, bad_heads);
  expect_error([&] { read_llama2c(odd_heads); }, {odd_heads, "n_heads 3"});
}

// ---------------------------------------------------------------------------
// The oracle: strata's own model against the original C implementation.

std::unique_ptr<Model<float>> stories260k() {
  const Llama2cModel m = read_llama2c(kLegacy);
  auto model = std::make_unique<Model<float>>(m.config, ops::make_backend<float>());
  for (const auto& [name, data] : m.tensors) {
    const int i = model->layout().find(name);
    EXPECT_GE(i, 0) << name;
    if (i < 0) continue;
    EXPECT_EQ(model->layout()[i].numel, int64_t(data.size())) << name;
    std::copy(data.begin(), data.end(), model->param(i));
  }
  return model;
}

std::vector<int32_t> ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

TEST(Llama2cOracle, FirstLogitsMatchRunC) {
  auto model = stories260k();
  const std::vector<float> want = fixture()["first_logits"].get<std::vector<float>>();
  ASSERT_EQ(want.size(), 512u);
  std::vector<float> got(512);
  const int32_t bos = 1;
  model->forward_logits(&bos, 1, 1, got.data());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])));
  std::printf("first-position logits: max |strata - run.c| = %.3g\n", worst);
  testing::expect_close(got, want, 0, 1e-4, "logits of BOS at position 0");
}

TEST(Llama2cOracle, GreedyGenerationMatchesRunC) {
  auto model = stories260k();
  const Tokenizer tok = Tokenizer::load(kSource + "/data/tokenizers/tok512.model");
  std::vector<int32_t> prompt = {1};
  for (int32_t t : tok.encode(fixture()["prompt"].get<std::string>())) prompt.push_back(t);
  ASSERT_EQ(prompt, ids(fixture()["prompt_ids"]));
  const std::vector<int32_t> want = ids(fixture()["greedy_ids"]);
  GenerateOptions o;
  o.max_new_tokens = int(want.size());
  o.sampling.temperature = 0;
  const std::vector<int32_t> got = generate_simple(*model, prompt, o);
  EXPECT_EQ(got, want);
  // The same text as run.c printed (it ends its output with a newline).
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), got.begin(), got.end());
  EXPECT_EQ(tok.decode(all) + "\n", fixture()["greedy_text"].get<std::string>());
}

TEST(Llama2cOracle, TextNllMatchesRunC) {
  // run.c's token ids of the text file (strata's own encoding gives the same
  // ids: TokenizerAgainstRunC), scored in windows of seq_len inputs that
  // restart the context, exactly as the fixture's ppl_method says.
  auto model = stories260k();
  const std::vector<int32_t> t = ids(fixture()["text_token_ids"]);
  ASSERT_EQ(int64_t(t.size()), fixture()["ppl_tokens"].get<int64_t>());
  const int L = model->config().max_position_embeddings;
  const int64_t n = int64_t(t.size());
  double sum = 0;
  int64_t count = 0;
  for (int64_t s = 0; s < n - 1; s += L) {
    const int T = int(std::min<int64_t>(s + L, n - 1) - s);
    const LossResult r = model->forward(t.data() + s, t.data() + s + 1, 1, T);
    sum += r.loss_sum;
    count += r.n_valid;
  }
  EXPECT_EQ(count, fixture()["ppl_targets"].get<int64_t>());
  const double mean = sum / double(count), want = fixture()["mean_nll"].get<double>();
  std::printf("text NLL: strata %.9f, run.c %.9f (relative difference %.3g); ppl %.6f vs %.6f\n",
              mean, want, std::fabs(mean - want) / want, std::exp(mean),
              fixture()["ppl"].get<double>());
  EXPECT_NEAR(mean, want, 1e-4 * want);
}

TEST(Llama2cOracle, WithoutThePermutationTheNllIsWrong) {
  // A control for the test above: the first position cannot see the q/k row
  // order (RoPE is the identity there), later ones do. Loading q and k in
  // llama2.c's interleaved order instead must move the NLL far off run.c's.
  auto model = stories260k();
  const LlamaConfig& c = model->config();
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (auto [which, heads] :
         {std::pair{"q_proj", c.num_attention_heads}, std::pair{"k_proj", c.num_key_value_heads}}) {
      const int i = model->layout().find("model.layers." + std::to_string(l) + ".self_attn." +
                                         which + ".weight");
      ASSERT_GE(i, 0);
      float* w = model->param(i);
      const std::vector<float> rotate_half(w, w + model->layout()[i].numel);
      const std::vector<float> interleaved = to_interleaved(rotate_half, heads, c.hidden_size);
      std::copy(interleaved.begin(), interleaved.end(), w);
    }
  const std::vector<int32_t> t = ids(fixture()["text_token_ids"]);
  const int T = c.max_position_embeddings;
  const LossResult r = model->forward(t.data(), t.data() + 1, 1, T);
  const double want = fixture()["mean_nll"].get<double>();
  std::printf(
      "NLL of the first %d targets with q/k left interleaved: %.4f (run.c, whole file: %.4f)\n", T,
      r.mean(), want);
  EXPECT_GT(r.mean(), want + 0.5);
}

TEST(Llama2cOracle, TokenizerAgainstRunC) {
  // strata encodes with sentencepiece (tok512.model); run.c with its own BPE
  // over tok512.bin (same vocabulary and scores). On the prompt and on the
  // whole text file (newlines, curly quotes, "<|endoftext|>" markers, 1882
  // tokens with BOS) the two agree id for id.
  const Tokenizer tok = Tokenizer::load(kSource + "/data/tokenizers/tok512.model");
  EXPECT_EQ(tok.encode("Once upon a time"), std::vector<int32_t>({403, 407, 261, 378}));
  const std::string text = slurp(kSource + "/data/corpora/tinystories/tinystories_sample.txt");
  std::vector<int32_t> strata_ids = {1};
  for (int32_t t : tok.encode(text)) strata_ids.push_back(t);
  const std::vector<int32_t> c_ids = ids(fixture()["text_token_ids"]);
  const auto first20 = ids(fixture()["first_token_ids"]);
  EXPECT_EQ(std::vector<int32_t>(c_ids.begin(), c_ids.begin() + 20), first20);  // BOS first
  size_t same = 0;
  while (same < std::min(strata_ids.size(), c_ids.size()) && strata_ids[same] == c_ids[same])
    ++same;
  EXPECT_EQ(strata_ids, c_ids) << "strata " << strata_ids.size() << " tokens, run.c "
                               << c_ids.size() << ", first difference at index " << same;
}

}  // namespace
}  // namespace strata
