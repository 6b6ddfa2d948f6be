#include "infer/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/philox.h"
#include "core/timer.h"
#include "infer/engine.h"

namespace strata {

std::vector<int32_t> generate_simple(Model<float>& model, const std::vector<int32_t>& prompt,
                                     const GenerateOptions& o,
                                     const std::function<void(int32_t)>& on_token) {
  const int V = model.config().vocab_size;
  ops::DeviceBuffer<float> dev;  // the logits in backend memory
  auto last_logits = [&](const int32_t* seq, int T, float* logits) {
    dev.reserve(&model.backend(), size_t(T) * V);
    model.forward_logits(seq, 1, T, dev.data());
    model.backend().to_host(logits, dev.data() + size_t(T - 1) * V, V);
  };
  return generate_simple(last_logits, V, model.config().max_position_embeddings, prompt, o,
                         on_token);
}

std::vector<int32_t> generate_simple(const LastLogits& last_logits, int V, int window,
                                     const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                     const std::function<void(int32_t)>& on_token) {
  STRATA_CHECK(!prompt.empty(), "generate: the prompt is empty (it needs at least BOS)");
  // The cached path's limits, so the two agree token for token: the prompt
  // keeps its last window - 1 tokens, and generation stops once the last
  // token no longer fits the window.
  std::vector<int32_t> seq(prompt.end() - std::min<ptrdiff_t>(ptrdiff_t(prompt.size()), window - 1),
                           prompt.end());
  std::vector<int32_t> out;
  std::vector<float> logits(static_cast<size_t>(V));
  for (int i = 0; i < o.max_new_tokens && int(seq.size()) <= window; ++i) {
    last_logits(seq.data(), int(seq.size()), logits.data());
    const int32_t next = sample_token(logits.data(), V, o.sampling, seq.size());
    seq.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
    if (o.is_eos(next) || (o.stop_requested && o.stop_requested())) break;
  }
  return out;
}

}  // namespace strata

namespace strata {

namespace {

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

// The weights stay as they are while a generation runs: the backend may keep
// converted copies (bf16 for decoding) until it ends, and drops them then.
class FrozenWeights {
 public:
  explicit FrozenWeights(ops::Backend<float>& be) : be_(be) { be_.freeze_weights(true); }
  ~FrozenWeights() { be_.freeze_weights(false); }
  FrozenWeights(const FrozenWeights&) = delete;
  FrozenWeights& operator=(const FrozenWeights&) = delete;

 private:
  ops::Backend<float>& be_;
};

// Generation's buffers: the residual-stream rows the engine works on live in
// backend memory (device memory on a GPU), and the logits are computed there
// and read back for sampling.
class Rows {
 public:
  Rows(KvEngine& eng, ops::Backend<float>& be, int C, int V) : eng_(eng), be_(be), C_(C), V_(V) {}
  // Room for n rows of the stream (contents kept only when no larger).
  float* stream(ops::DeviceBuffer<float>& b, int n) { return b.reserve(&be_, size_t(n) * C_); }
  // The logits of n rows of x, on the host.
  const float* logits(const float* x, int n) {
    dev_.reserve(&be_, size_t(n) * V_);
    host_.resize(size_t(n) * V_);
    eng_.logits(x, n, dev_.data());
    be_.to_host(host_.data(), dev_.data(), int64_t(n) * V_);
    return host_.data();
  }

 private:
  KvEngine& eng_;
  ops::Backend<float>& be_;
  int C_, V_;
  ops::DeviceBuffer<float> dev_;
  std::vector<float> host_;
};

}  // namespace

std::vector<int32_t> generate(Model<float>& model, const std::vector<int32_t>& prompt_in,
                              const GenerateOptions& o,
                              const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats_out) {
  STRATA_CHECK(!prompt_in.empty(), "generate: the prompt is empty (it needs at least BOS)");
  if (o.speculations <= 0)  // plain decoding and early exit: a batch of one
    return generate_batch(
        model, {prompt_in}, o,
        [&](int, int32_t t) {
          if (on_token) on_token(t);
        },
        stats_out)[0];
  const FrozenWeights frozen(model.backend());
  const LlamaConfig& c = model.config();
  const int L = c.num_hidden_layers, V = c.vocab_size, C = c.hidden_size;
  const int ctx = c.max_position_embeddings;
  STRATA_CHECK(o.exit_layer > 0 && o.exit_layer < L,
               "self-speculative decoding needs an exit layer below ", L, " (--exit-layer E)");
  model.plan().check_exit(o.exit_layer, "self-speculative decoding: exit layer");
  const int E = o.exit_layer;
  GenerateStats st;
  // The prompt keeps its last ctx - 1 tokens so at least one can be generated.
  std::vector<int32_t> seq(prompt_in.end() - std::min<ptrdiff_t>(prompt_in.size(), ctx - 1),
                           prompt_in.end());
  st.prompt_tokens = int(seq.size());
  KvEngine eng(model, ctx, L, 1, o.kv_cache);
  Rows rows(eng, model.backend(), C, V);
  std::vector<int32_t> out;
  ops::DeviceBuffer<float> xb;
  const float* logits = nullptr;
  Timer timer;
  auto emit = [&](int32_t t) {
    seq.push_back(t);
    out.push_back(t);
    if (on_token) on_token(t);
    return o.is_eos(t) || int(out.size()) >= o.max_new_tokens ||
           (o.stop_requested && o.stop_requested());
  };
  if (o.max_new_tokens <= 0) return out;

  // Prefill: every prompt token through every layer, logits of the last position.
  const int n0 = int(seq.size());
  float* x = rows.stream(xb, n0);
  eng.embed(seq.data(), n0, x);
  eng.run_layers(x, n0, 0, L);
  logits = rows.logits(x + size_t(n0 - 1) * C, 1);
  st.prefill_s = timer.seconds();
  timer.reset();
  bool done = emit(sample_token(logits, V, o.sampling, seq.size()));

  {
    // Invariant at the start of a round: every layer caches all committed
    // tokens but the last, which no layer has seen yet.
    const int d_max = o.speculations;
    ops::DeviceBuffer<float> hb;  // exit-layer states of this round's tokens (the KVQ cache)
    ops::DeviceBuffer<float>
        mb;  // and the streams inside layer E - 1 (a ladder layer E reads them)
    float* hidden = rows.stream(hb, d_max + 1);
    float* mids = rows.stream(mb, d_max + 1);
    x = rows.stream(xb, 1);
    std::vector<int32_t> drafts;
    const float* full_logits = nullptr;
    const bool sampled = o.sampling.temperature > 0;
    std::vector<std::vector<double>> q(static_cast<size_t>(d_max));  // draft distributions
    // Random numbers keyed by (position of the token decided, use).
    const PhiloxStream rng(o.sampling.seed, /*purpose "SPEC"*/ 0x53504543u, 0);
    auto draw = [](int position, int use) { return uint64_t(position) * 4 + uint64_t(use); };
    while (!done) {
      const int n = int(seq.size());
      // Room: the round processes the last token and up to d drafts.
      const int room = ctx - (n - 1);
      if (room < 1) {
        st.hit_context = true;
        break;
      }
      const int d = std::min(d_max, room - 1);
      // Draft d tokens greedily with layers [0, E), keeping each processed
      // token's state at the exit layer.
      drafts.clear();
      int32_t cur = seq.back();
      Timer phase;
      for (int i = 0; i <= d; ++i) {
        float* h = hidden + size_t(i) * C;
        eng.embed(&cur, 1, h);
        eng.run_layers(h, 1, 0, E, 0, mids + size_t(i) * C);
        if (i == d) break;  // the last draft only needs its exit state
        model.backend().copy(x, h, C);
        logits = rows.logits(x, 1);
        if (sampled) {  // draft from q, the early exit's (filtered) distribution
          q[size_t(i)] = token_distribution(logits, V, o.sampling);
          cur = sample_from(q[size_t(i)], rng.uniform(draw(n + i, 0)));
        } else {
          cur = argmax(logits, V);
        }
        drafts.push_back(cur);
      }
      st.draft_s += phase.seconds();
      phase.reset();
      // Verify: the upper layers over the d + 1 exit states in one pass give
      // the full model's prediction after the last token and after each draft.
      eng.run_layers(hidden, d + 1, E, L, 0, mids);
      full_logits = rows.logits(hidden, d + 1);
      st.verify_s += phase.seconds();
      ++st.rounds;
      st.drafted += d;
      int k = 0;
      int32_t next = 0;
      if (!sampled) {
        while (k < d && argmax(full_logits + size_t(k) * V, V) == drafts[size_t(k)]) ++k;
        next = argmax(full_logits + size_t(k) * V, V);
      } else {
        // Rejection rule (speculative sampling): accept draft x with
        // probability min(1, p(x) / q(x)); at the first rejection draw from
        // max(0, p - q) renormalised; after d acceptances draw from p. The
        // result is distributed as sampling from the full model.
        bool rejected = false;
        for (; k < d; ++k) {
          const auto p = token_distribution(full_logits + size_t(k) * V, V, o.sampling);
          const int32_t t = drafts[size_t(k)];
          const double ratio =
              q[size_t(k)][size_t(t)] > 0 ? p[size_t(t)] / q[size_t(k)][size_t(t)] : 1.0;
          if (rng.uniform(draw(n + k, 1)) < ratio) continue;
          std::vector<double> r(static_cast<size_t>(V));
          double mass = 0;
          for (int v = 0; v < V; ++v)
            mass += r[size_t(v)] = std::max(0.0, p[size_t(v)] - q[size_t(k)][size_t(v)]);
          next = mass > 0 ? sample_from(r, rng.uniform(draw(n + k, 2)))
                          : sample_from(p, rng.uniform(draw(n + k, 2)));
          rejected = true;
          break;
        }
        if (!rejected)
          next = sample_from(token_distribution(full_logits + size_t(d) * V, V, o.sampling),
                             rng.uniform(draw(n + d, 3)));
      }
      st.accepted += k;
      // Commit the accepted drafts and the full model's next token.
      for (int i = 0; i < k && !done; ++i) done = emit(drafts[size_t(i)]);
      if (!done) done = emit(next);
      // Keep the cache entries of the last token and the accepted drafts.
      eng.crop(0, L, std::min(n + k, eng.length(0)));
      if (int(seq.size()) - 1 != eng.length(0)) {
        // Stopped inside the accepted drafts (EOS or max tokens): nothing follows.
        break;
      }
    }
  }
  st.decode_s = timer.seconds();
  st.new_tokens = int(out.size());
  if (stats_out) *stats_out = st;
  return out;
}

}  // namespace strata

namespace strata {

GenerateStats& GenerateStats::operator+=(const GenerateStats& o) {
  prompt_tokens += o.prompt_tokens;
  new_tokens += o.new_tokens;
  prefill_s += o.prefill_s;
  decode_s += o.decode_s;
  rounds += o.rounds;
  drafted += o.drafted;
  accepted += o.accepted;
  draft_s += o.draft_s;
  verify_s += o.verify_s;
  hit_context |= o.hit_context;
  graph_steps += o.graph_steps;
  return *this;
}

std::vector<std::vector<int32_t>> generate_batch(Model<float>& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& o,
                                                 const std::function<void(int, int32_t)>& on_token,
                                                 GenerateStats* stats_out) {
  const int B = int(prompts.size());
  std::vector<std::vector<int32_t>> outs(static_cast<size_t>(B));
  GenerateStats total;
  if (B == 0) {
    if (stats_out) *stats_out = total;
    return outs;
  }
  if (o.speculations > 0) {
    for (int i = 0; i < B; ++i) {
      GenerateStats st;
      outs[size_t(i)] = generate(
          model, prompts[size_t(i)], o,
          [&](int32_t t) {
            if (on_token) on_token(i, t);
          },
          &st);
      total += st;
    }
    if (stats_out) *stats_out = total;
    return outs;
  }
  const FrozenWeights frozen(model.backend());
  const LlamaConfig& c = model.config();
  const int L = c.num_hidden_layers, V = c.vocab_size, C = c.hidden_size;
  const int ctx = c.max_position_embeddings;
  const int E = o.exit_layer > 0 ? o.exit_layer : L;
  model.plan().check_exit(E, "exit layer");
  KvEngine eng(model, ctx, E, B, o.kv_cache);
  eng.set_graphs(o.graphs);
  Rows stage(eng, model.backend(), C, V);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), o.max_new_tokens <= 0);
  ops::DeviceBuffer<float> xb;
  auto emit = [&](int i, int32_t t) {
    seqs[size_t(i)].push_back(t);
    outs[size_t(i)].push_back(t);
    if (on_token) on_token(i, t);
    if (o.is_eos(t) || int(outs[size_t(i)].size()) >= o.max_new_tokens ||
        (o.stop_requested && o.stop_requested()))
      done[size_t(i)] = true;
  };
  Timer timer;
  for (int i = 0; i < B; ++i) {
    const auto& p = prompts[size_t(i)];
    STRATA_CHECK(!p.empty(), "generate: prompt ", i + 1, " is empty (it needs at least BOS)");
    seqs[size_t(i)].assign(p.end() - std::min<ptrdiff_t>(p.size(), ctx - 1), p.end());
    const int n = int(seqs[size_t(i)].size());
    total.prompt_tokens += n;
    if (done[size_t(i)]) continue;
    float* x = stage.stream(xb, n);
    eng.embed(seqs[size_t(i)].data(), n, x);
    eng.run_layers(x, n, 0, E, i);
    const float* logits = stage.logits(x + size_t(n - 1) * C, 1);
    emit(i, sample_token(logits, V, o.sampling, seqs[size_t(i)].size()));
  }
  total.prefill_s = timer.seconds();
  timer.reset();
  std::vector<int> rows;
  std::vector<int32_t> last;
  for (;;) {
    rows.clear();
    last.clear();
    for (int i = 0; i < B; ++i) {
      if (done[size_t(i)]) continue;
      if (int(seqs[size_t(i)].size()) > ctx) {  // no cache slot left for the last token
        done[size_t(i)] = true;
        total.hit_context = true;
        continue;
      }
      rows.push_back(i);
      last.push_back(seqs[size_t(i)].back());
    }
    if (rows.empty()) break;
    const int R = int(rows.size());
    float* x = stage.stream(xb, R);
    eng.embed(last.data(), R, x);
    eng.decode_rows(x, rows, 0, E);
    const float* logits = stage.logits(x, R);
    for (int r = 0; r < R; ++r) {
      const int i = rows[size_t(r)];
      emit(i, sample_token(logits + size_t(r) * V, V, o.sampling, seqs[size_t(i)].size()));
    }
  }
  total.decode_s = timer.seconds();
  total.graph_steps = eng.graph_replays();
  for (const auto& out : outs) total.new_tokens += int(out.size());
  if (stats_out) *stats_out = total;
  return outs;
}

}  // namespace strata
