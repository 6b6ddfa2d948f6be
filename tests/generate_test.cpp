// KV-cache generation against the cache-free reference: plain decoding
// (greedy and sampled), early exit against a model truncated to E layers, and
// greedy self-speculative decoding against greedy plain decoding, on random
// models and on the trained stories260K.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "infer/sampler.h"
#include "infer/spec_cost.h"
#include "infer/text_generation.h"
#include "io/llama2c.h"
#include "model/model.h"
#include "plan_reference.h"
#include "testing.h"

namespace strata {
namespace {

const std::string kSource = STRATA_SOURCE_DIR;

std::unique_ptr<Model<float>> random_model(int layers, int kv_heads, bool tied, bool bias,
                                           uint64_t seed) {
  // (initializer_range 0.5: peaked distributions, so greedy choices are clear)
  const LlamaConfig c = testing::plan_test_config(layers, tied, bias, kv_heads);
  auto m = std::make_unique<Model<float>>(c, ops::make_backend<float>());
  m->init_weights(seed);
  return m;
}

std::unique_ptr<Model<float>> stories260k() {
  const Llama2cModel m = read_llama2c(kSource + "/data/models/stories260K/stories260K.bin");
  auto model = std::make_unique<Model<float>>(m.config, ops::make_backend<float>());
  for (const auto& [name, data] : m.tensors)
    std::copy(data.begin(), data.end(), model->param(model->layout().find(name)));
  return model;
}

// The first E layers of `m` (shared embedding, final norm and head).
std::unique_ptr<Model<float>> truncated(Model<float>& m, int E) {
  LlamaConfig c = m.config();
  c.num_hidden_layers = E;
  auto t = std::make_unique<Model<float>>(c, ops::make_backend<float>());
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
  // The cache-free reference stops at the same place with the same tokens,
  // and so does a prompt longer than the context (its last 63 tokens kept).
  EXPECT_EQ(generate_simple(*m, p, o), all);
  const auto long_prompt = prompt_of(100, 61, 4);
  const auto kept = generate(*m, long_prompt, o, {}, &st);
  EXPECT_EQ(int(kept.size()), 2);
  EXPECT_EQ(generate_simple(*m, long_prompt, o), kept);
  // EOS: choose a token the run emits and stop there.
  o.max_new_tokens = 20;
  o.eos_id = all[5];
  const auto cut = generate(*m, p, o);
  const size_t first = size_t(std::find(all.begin(), all.end(), o.eos_id) - all.begin());
  ASSERT_EQ(cut.size(), first + 1);
  EXPECT_EQ(cut.back(), o.eos_id);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), all.begin()));
  // An end-of-turn token ends it the same way, in every generation path.
  o.eos_id = -1;
  o.more_eos = {all[7], all[3]};
  const size_t turn = std::min(size_t(std::find(all.begin(), all.end(), all[7]) - all.begin()),
                               size_t(std::find(all.begin(), all.end(), all[3]) - all.begin()));
  EXPECT_EQ(generate(*m, p, o).size(), turn + 1);
  EXPECT_EQ(generate_simple(*m, p, o).size(), turn + 1);
  EXPECT_EQ(generate_batch(*m, {p, p}, o)[1].size(), turn + 1);
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

// 128 tokens past EOS from a prompt where, before the few-row GEMM, a
// verification over 4 rows and a single-row decode step disagreed in the
// last bits of a near-tie and greedy self-speculation left the full model's
// text (E 2, d 3, token 70 or so).
TEST(Generate, SelfSpeculativeGreedyEqualsFullModelOnLongOutputs) {
  auto m = stories260k();
  const Tokenizer tok = Tokenizer::load(kSource + "/data/tokenizers/tok512.model");
  std::vector<int32_t> p = {1};
  for (int32_t t : tok.encode("The family of Dashwood had long been settled in Sussex."))
    p.push_back(t);
  GenerateOptions o;
  o.max_new_tokens = 128;
  o.eos_id = -1;
  const auto ref = generate(*m, p, o);
  for (int E : {2, 3})
    for (int d : {3, 4, 7}) {
      GenerateOptions s = o;
      s.exit_layer = E;
      s.speculations = d;
      EXPECT_EQ(generate(*m, p, s), ref) << "E " << E << " d " << d;
    }
}

// The cost model's arithmetic (infer/spec_cost.h).
TEST(Generate, SelfSpeculativeCostModel) {
  EXPECT_DOUBLE_EQ(tokens_per_round(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(tokens_per_round(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(tokens_per_round(0.5, 3), 1.875);
  EXPECT_THROW(tokens_per_round(1.5, 3), Error);
  SpecCost c;
  c.t_full = 2e-3, c.t_exit = 1e-3, c.t_verify = 2e-3, c.drafts = 4, c.tokens = 3;
  EXPECT_DOUBLE_EQ(c.round_seconds(), 7e-3);
  EXPECT_DOUBLE_EQ(c.speedup(), 6.0 / 7.0);
  // No head, exit at half depth, 4 drafts, 2.68 tokens per round: a round reads
  // 5 half-models and one half-model, 3 full models' worth, for 2.68 tokens.
  const SpecCost b = bandwidth_bound_spec_cost(100e6, 0, 12, 6, 4, 2.68, 50e9);
  EXPECT_DOUBLE_EQ(b.t_full, 2e-3);
  EXPECT_NEAR(b.speedup(), 2.68 / 3.0, 1e-12);
  // A head as large as 4 layers makes each draft cost more than half a step.
  const SpecCost h = bandwidth_bound_spec_cost(120e6, 40e6, 12, 6, 4, 2.68, 50e9);
  EXPECT_LT(h.speedup(), b.speedup());
  EXPECT_THROW(bandwidth_bound_spec_cost(1, 1, 12, 12, 4, 2, 1), Error);
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

// Runs summed (prompts one after another): counts and times add up,
// hit_context if any run hit it.
TEST(Generate, StatsAddUp) {
  GenerateStats a, b;
  a.prompt_tokens = 3, a.new_tokens = 5, a.prefill_s = 0.25, a.decode_s = 1.5;
  a.rounds = 2, a.drafted = 8, a.accepted = 6, a.draft_s = 0.5, a.verify_s = 0.75;
  b = a;
  b.hit_context = true;
  a += b;
  EXPECT_EQ(a.prompt_tokens, 6);
  EXPECT_EQ(a.new_tokens, 10);
  EXPECT_EQ(a.prefill_s, 0.5);
  EXPECT_EQ(a.decode_s, 3.0);
  EXPECT_EQ(a.rounds, 4);
  EXPECT_EQ(a.drafted, 16);
  EXPECT_EQ(a.accepted, 12);
  EXPECT_EQ(a.draft_s, 1.0);
  EXPECT_EQ(a.verify_s, 1.5);
  EXPECT_TRUE(a.hit_context);
}

// Streamed text over a detokenizer of one letter per id (0: BOS, nothing):
// with a stop string, its possible start is held back and the text ends
// before it; EOS ends the text without showing; what is held back for a stop
// string that never comes is released at the end.
TEST(Generate, TextStreamHoldsBackTheStopString) {
  const Detokenizer decode = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids)
      if (id > 0) s += char('a' + id - 1);
    return s;
  };
  TextStream cut(decode, {0}, "cd", -1);
  std::string shown;
  for (int32_t t : {1, 2, 3, 4, 5}) shown += cut.push(t);
  EXPECT_EQ(shown, "ab");
  EXPECT_TRUE(cut.stopped());
  EXPECT_EQ(cut.finish(), "");
  EXPECT_EQ(cut.shown(), "ab");
  TextStream eos(decode, {0, 1}, "", 3);
  EXPECT_EQ(eos.push(2), "b");
  EXPECT_EQ(eos.push(3), "");
  EXPECT_EQ(eos.tokens(), (std::vector<int32_t>{2}));
  TextStream held(decode, {0}, "xy", -1);
  EXPECT_EQ(held.push(1), "");
  EXPECT_EQ(held.push(2), "a");
  EXPECT_FALSE(held.stopped());
  EXPECT_EQ(held.finish(), "b");
  EXPECT_EQ(held.shown(), "ab");
}

// A character whose bytes come in two tokens (byte-level BPE): the first
// token alone decodes to U+FFFD, which is not shown; the character is, whole,
// once its last byte comes.
TEST(Generate, TextStreamWaitsForASplitCharacter) {
  const Tokenizer t =
      Tokenizer::load(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/bpe/llama3/tokenizer.json");
  const Detokenizer decode = [&](const std::vector<int32_t>& ids) { return t.decode(ids); };
  const std::vector<int32_t> ids = t.encode("é🤖!");  // bytes of one character in several ids
  ASSERT_GT(ids.size(), 3u);
  TextStream s(decode, {}, "", -1);
  std::string shown;
  for (int32_t id : ids) {
    const std::string piece = s.push(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    shown += piece;
  }
  shown += s.finish();
  EXPECT_EQ(shown, "é🤖!");
}

TEST(Generate, BadOptionsAreErrors) {
  auto m = random_model(2, 2, false, false, 1);
  GenerateOptions o;
  o.exit_layer = 3;
  EXPECT_THROW(generate(*m, {1, 2}, o), Error);
  o.exit_layer = 2;  // = L: nothing to verify with
  o.speculations = 2;
  EXPECT_THROW(generate(*m, {1, 2}, o), Error);
  EXPECT_THROW(generate(*m, {}, GenerateOptions{}), Error);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(Generate, BatchEqualsOneByOne) {
  auto m = random_model(3, 2, false, true, 17);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 9, 4, 30, 2}) prompts.push_back(prompt_of(n, 61, uint32_t(100 + n)));
  for (double temperature : {0.0, 0.8}) {
    GenerateOptions o;
    o.max_new_tokens = 24;
    o.sampling.temperature = temperature;
    o.sampling.seed = 5;
    // One prompt stops early at EOS: a token its own run emits.
    o.eos_id = generate(*m, prompts[2], o)[6];
    GenerateStats st;
    std::vector<int> seen(prompts.size(), 0);
    const auto batch = generate_batch(
        *m, prompts, o, [&](int i, int32_t) { ++seen[size_t(i)]; }, &st);
    ASSERT_EQ(batch.size(), prompts.size());
    int total = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(batch[i], generate(*m, prompts[i], o)) << "prompt " << i << " T " << temperature;
      EXPECT_EQ(seen[i], int(batch[i].size()));
      total += int(batch[i].size());
    }
    EXPECT_LE(batch[2].size(), 7u);
    EXPECT_EQ(st.new_tokens, total);
    EXPECT_EQ(st.prompt_tokens, 1 + 9 + 4 + 30 + 2);
  }
  // Early exit and self-speculation in a batch give the single-prompt results too.
  GenerateOptions e;
  e.max_new_tokens = 12;
  e.exit_layer = 2;
  const auto be = generate_batch(*m, prompts, e);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(be[i], generate(*m, prompts[i], e));
  e.speculations = 3;
  GenerateOptions full;
  full.max_new_tokens = 12;
  const auto bs = generate_batch(*m, prompts, e);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(bs[i], generate(*m, prompts[i], full));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Speculative sampling is distributed as sampling from the full model: the
// marginals of the 2nd and 3rd generated tokens (both decided by
// self-speculative rounds) over 4000 seeds against the exact ones.
TEST(Generate, SelfSpeculativeSamplingMatchesTheFullModel) {
  LlamaConfig c;
  c.vocab_size = 7;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.max_position_embeddings = 16;
  c.initializer_range = 0.6;
  c.finalize();
  Model<float> m(c, ops::make_backend<float>());
  m.init_weights(4);
  const std::vector<int32_t> prompt = {1, 3, 5};
  const int V = 7;
  SamplingOptions so;
  so.temperature = 1.0;
  auto dist = [&](const std::vector<int32_t>& seq) {
    std::vector<float> logits(seq.size() * V);
    m.forward_logits(seq.data(), 1, int(seq.size()), logits.data());
    return token_distribution(logits.data() + (seq.size() - 1) * V, V, so);
  };
  // Exact marginals of tokens 2 and 3.
  std::vector<double> p2(V, 0.0), p3(V, 0.0);
  const auto p1 = dist(prompt);
  for (int a = 0; a < V; ++a) {
    auto s1 = prompt;
    s1.push_back(a);
    const auto pa = dist(s1);
    for (int b = 0; b < V; ++b) {
      p2[size_t(b)] += p1[size_t(a)] * pa[size_t(b)];
      auto s2 = s1;
      s2.push_back(b);
      const auto pb = dist(s2);
      for (int t = 0; t < V; ++t) p3[size_t(t)] += p1[size_t(a)] * pa[size_t(b)] * pb[size_t(t)];
    }
  }
  // The draft (layer 1 of 3) disagrees with the full model: the test has teeth.
  {
    GenerateOptions e;
    e.max_new_tokens = 1;
    e.exit_layer = 1;
    e.sampling = so;
    auto t = truncated(m, 1);
    std::vector<float> logits(prompt.size() * V);
    t->forward_logits(prompt.data(), 1, int(prompt.size()), logits.data());
    const auto q1 = token_distribution(logits.data() + (prompt.size() - 1) * V, V, so);
    double tv = 0;
    for (int v = 0; v < V; ++v) tv += std::abs(q1[size_t(v)] - p1[size_t(v)]) / 2;
    ASSERT_GT(tv, 0.1) << "draft and full model agree too closely for a meaningful test";
  }
  const int N = 4000;
  std::vector<double> h2(V, 0.0), h3(V, 0.0);
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.exit_layer = 1;
  o.speculations = 3;
  o.sampling = so;
  int64_t drafted = 0, accepted = 0;
  for (int s = 0; s < N; ++s) {
    o.sampling.seed = uint64_t(1000 + s);
    GenerateStats st;
    const auto out = generate(m, prompt, o, {}, &st);
    ASSERT_EQ(out.size(), 3u);
    h2[size_t(out[1])] += 1.0 / N;
    h3[size_t(out[2])] += 1.0 / N;
    drafted += st.drafted;
    accepted += st.accepted;
  }
  double tv2 = 0, tv3 = 0;
  for (int v = 0; v < V; ++v) {
    tv2 += std::abs(h2[size_t(v)] - p2[size_t(v)]) / 2;
    tv3 += std::abs(h3[size_t(v)] - p3[size_t(v)]) / 2;
  }
  EXPECT_LT(tv2, 0.04) << "token 2";
  EXPECT_LT(tv3, 0.04) << "token 3";
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);  // some drafts rejected: the residual path ran
}

}  // namespace
}  // namespace strata
