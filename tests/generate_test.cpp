// KV-cache generation against the cache-free reference: plain decoding
// (greedy and sampled), early exit against a model truncated to E layers, and
// greedy self-speculative decoding against greedy plain decoding, on random
// models and on the trained stories260K.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "io/llama2c.h"
#include "model/model.h"
#include "testing.h"

namespace strata {
namespace {

const std::string kSource = STRATA_SOURCE_DIR;

std::unique_ptr<Model<float>> random_model(int layers, int kv_heads, bool tied, bool bias,
                                           uint64_t seed) {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  c.initializer_range = 0.5;  // peaked distributions: greedy choices are clear
  c.finalize();
  auto m = std::make_unique<Model<float>>(c, ops::make_cpu_backend<float>());
  m->init_weights(seed);
  return m;
}

std::unique_ptr<Model<float>> stories260k() {
  const Llama2cModel m = read_llama2c(kSource + "/data/models/stories260K/stories260K.bin");
  auto model = std::make_unique<Model<float>>(m.config, ops::make_cpu_backend<float>());
  for (const auto& [name, data] : m.tensors)
    std::copy(data.begin(), data.end(), model->param(model->layout().find(name)));
  return model;
}

// The first E layers of `m` (shared embedding, final norm and head).
std::unique_ptr<Model<float>> truncated(Model<float>& m, int E) {
  LlamaConfig c = m.config();
  c.num_hidden_layers = E;
  auto t = std::make_unique<Model<float>>(c, ops::make_cpu_backend<float>());
  for (const auto& info : t->layout().tensors()) {
    const int src = m.layout().find(info.name);
    std::copy(m.param(src), m.param(src) + info.numel, t->param(t->layout().find(info.name)));
  }
  return t;
}

std::vector<int32_t> prompt_of(int n, int V, uint32_t stream) {
  auto p = testing::random_tokens(n, V, stream);
  p[0] = 1;  // BOS
  return p;
}

TEST(Generate, KvCacheEqualsNoCacheGreedy) {
  for (auto [kv, tied, bias] : {std::tuple{4, false, false}, {2, true, false}, {1, false, true}}) {
    auto m = random_model(3, kv, tied, bias, 7);
    GenerateOptions o;
    o.max_new_tokens = 40;
    for (int plen : {1, 5, 17}) {
      const auto p = prompt_of(plen, 61, uint32_t(plen));
      const auto ref = generate_simple(*m, p, o);
      GenerateStats st;
      const auto got = generate(*m, p, o, {}, &st);
      EXPECT_EQ(got, ref) << "kv " << kv << " prompt " << plen;
      EXPECT_EQ(st.prompt_tokens, plen);
      EXPECT_EQ(st.new_tokens, 40);
    }
  }
}

TEST(Generate, KvCacheEqualsNoCacheSampled) {
  auto m = random_model(2, 2, false, false, 3);
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.sampling.temperature = 0.9;
  o.sampling.top_p = 0.95;
  o.sampling.top_k = 20;
  o.sampling.seed = 11;
  const auto p = prompt_of(6, 61, 2);
  EXPECT_EQ(generate(*m, p, o), generate_simple(*m, p, o));
}

TEST(Generate, StopsAtEosAndAtTheContext) {
  auto m = random_model(2, 2, false, false, 5);
  GenerateOptions o;
  o.max_new_tokens = 200;  // more than the context (64) allows
  const auto p = prompt_of(10, 61, 9);
  GenerateStats st;
  const auto all = generate(*m, p, o, {}, &st);
  EXPECT_TRUE(st.hit_context);
  EXPECT_EQ(int(all.size()), 64 - 10 + 1);  // the last token needs no cache slot
  // EOS: choose a token the run emits and stop there.
  o.max_new_tokens = 20;
  o.eos_id = all[5];
  const auto cut = generate(*m, p, o);
  const size_t first = size_t(std::find(all.begin(), all.end(), o.eos_id) - all.begin());
  ASSERT_EQ(cut.size(), first + 1);
  EXPECT_EQ(cut.back(), o.eos_id);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), all.begin()));
}

TEST(Generate, EarlyExitEqualsTruncatedModel) {
  auto m = random_model(4, 2, true, false, 13);
  for (int E : {1, 2, 3}) {
    auto t = truncated(*m, E);
    GenerateOptions o;
    o.max_new_tokens = 25;
    const auto p = prompt_of(7, 61, uint32_t(E));
    GenerateOptions oe = o;
    oe.exit_layer = E;
    EXPECT_EQ(generate(*m, p, oe), generate_simple(*t, p, o)) << "exit " << E;
  }
}

void expect_self_spec_exact(Model<float>& m, const std::vector<int32_t>& p, int new_tokens,
                            const std::string& what) {
  GenerateOptions o;
  o.max_new_tokens = new_tokens;
  const auto ref = generate(m, p, o);
  ASSERT_EQ(ref, generate_simple(m, p, o)) << what;
  const int L = m.config().num_hidden_layers;
  for (int E = 1; E < L; ++E)
    for (int d : {1, 3, 6}) {
      GenerateOptions s = o;
      s.exit_layer = E;
      s.speculations = d;
      GenerateStats st;
      const auto got = generate(m, p, s, {}, &st);
      EXPECT_EQ(got, ref) << what << ": E " << E << " d " << d;
      EXPECT_LE(st.accepted, st.drafted);
      EXPECT_GE(st.tokens_per_round(), 1.0);
      EXPECT_LE(st.tokens_per_round(), d + 1.0);
    }
}

TEST(Generate, SelfSpeculativeGreedyEqualsFullModelRandom) {
  auto m = random_model(4, 2, false, false, 21);
  expect_self_spec_exact(*m, prompt_of(5, 61, 4), 40, "random");
}

TEST(Generate, SelfSpeculativeGreedyEqualsFullModelStories260K) {
  auto m = stories260k();
  // "Once upon a time" in tok512 (BOS first).
  expect_self_spec_exact(*m, {1, 403, 407, 261, 378}, 60, "stories260K");
  // A trained model's early layers agree with it often enough to accept drafts.
  GenerateOptions s;
  s.max_new_tokens = 60;
  s.exit_layer = 4;
  s.speculations = 3;
  GenerateStats st;
  generate(*m, {1, 403, 407, 261, 378}, s, {}, &st);
  EXPECT_GT(st.accepted, 0);
}

TEST(Generate, SelfSpeculativeStopsAtTheContextAndEos) {
  auto m = random_model(3, 2, false, false, 8);
  GenerateOptions o;
  o.max_new_tokens = 500;
  const auto p = prompt_of(9, 61, 6);
  GenerateStats a, b;
  const auto ref = generate(*m, p, o, {}, &a);
  o.exit_layer = 1;
  o.speculations = 5;
  EXPECT_EQ(generate(*m, p, o, {}, &b), ref);
  EXPECT_TRUE(b.hit_context);
  o.max_new_tokens = 30;
  o.eos_id = ref[12];
  const auto cut = generate(*m, p, o);
  EXPECT_EQ(cut.back(), o.eos_id);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), ref.begin()));
}

TEST(Generate, BadOptionsAreErrors) {
  auto m = random_model(2, 2, false, false, 1);
  GenerateOptions o;
  o.exit_layer = 3;
  EXPECT_THROW(generate(*m, {1, 2}, o), Error);
  o.exit_layer = 2;  // = L: nothing to verify with
  o.speculations = 2;
  EXPECT_THROW(generate(*m, {1, 2}, o), Error);
  o.exit_layer = 1;
  o.sampling.temperature = 0.5;
  EXPECT_THROW(generate(*m, {1, 2}, o), Error);
  EXPECT_THROW(generate(*m, {}, GenerateOptions{}), Error);
}

}  // namespace
}  // namespace strata
