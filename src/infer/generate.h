// Text generation without a KV cache: each new token re-runs the model over
// the whole sequence (the simple, obviously-correct path; the KV-cache engine
// replaces it behind the same `strata generate` command).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "infer/sampler.h"
#include "model/model.h"

namespace strata {

struct GenerateOptions {
  int max_new_tokens = 64;
  SamplingOptions sampling;
  int32_t eos_id = -1;  // stop after emitting this token (-1: never)
  // Other tokens that end generation the same way (a chat model's end of
  // turn, e.g. Llama 3's <|eot_id|>: Tokenizer::end_of_turn_ids).
  std::vector<int32_t> more_eos;
  bool is_eos(int32_t t) const {
    if (t == eos_id && t >= 0) return true;
    for (int32_t e : more_eos)
      if (t == e) return true;
    return false;
  }
  // Early exit: run layers [0, exit_layer) then the final norm and head
  // (0: every layer).
  int exit_layer = 0;
  // Self-speculative decoding: draft this many tokens per round with layers
  // [0, exit_layer), verify them with the rest (0: off). Greedy: the drafts
  // the full model agrees with; sampling: the rejection rule.
  int speculations = 0;
  // Checked after each token (after on_token): true ends generation (stop strings).
  std::function<bool()> stop_requested;
  // Decode steps as recorded graphs where the backend has them (cuda, simt:
  // KvEngine::set_graphs); the same tokens either way.
  bool graphs = true;
  // The KV cache's storage: fp32, or bf16 (half its memory and the bytes the
  // cached attention reads; keys and values rounded to bf16).
  ops::Dtype kv_cache = ops::Dtype::F32;
};

struct GenerateStats {
  int prompt_tokens = 0, new_tokens = 0;
  double prefill_s = 0, decode_s = 0;
  // Self-speculative decoding: rounds (one pass of the upper layers each),
  // drafted and accepted draft tokens.
  int64_t rounds = 0, drafted = 0, accepted = 0;
  // Of decode_s: drafting (embedding, layers [0, E) and the exit head for
  // each round's tokens) and verifying (layers [E, L) and the head over the
  // round's d + 1 states); the rest is sampling and bookkeeping.
  double draft_s = 0, verify_s = 0;
  bool hit_context = false;  // stopped at the model's context length
  int64_t graph_steps = 0;   // decode steps replayed from a recorded graph
  // Sums the counts and times of another run (prompts generated one after
  // another); hit_context if either hit it.
  GenerateStats& operator+=(const GenerateStats& o);
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_round() const { return rounds ? double(new_tokens) / double(rounds) : 0.0; }
};

// KV-cache generation: prefill the prompt, then decode token by token (or in
// self-speculative rounds). Returns the new tokens. A prompt longer than the
// context keeps its last tokens; generation stops when the context is full
// (stats->hit_context). Greedy self-speculative output equals greedy plain
// output; sampled self-speculative output is distributed as sampling from the
// full model (speculative sampling's rejection rule), with its own random
// stream (so not token-equal to plain sampling with the same seed).
std::vector<int32_t> generate(Model<float>& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token = {},
                              GenerateStats* stats = nullptr);

// Extends `prompt` (token ids, usually starting with BOS) and returns only the
// new tokens. `on_token` (optional) sees each token as it is chosen. Limits
// as generate()'s: a prompt longer than the context keeps its last tokens,
// and generation stops when the context is full.
std::vector<int32_t> generate_simple(Model<float>& model, const std::vector<int32_t>& prompt,
                                     const GenerateOptions& options,
                                     const std::function<void(int32_t)>& on_token = {});
// The same with the logits at the last position of a sequence from
// `last_logits(seq, T, logits)` (V values, host memory): a model run some
// other way (pipeline stages, StageRunner::last_logits). `window`: the
// model's context.
using LastLogits = std::function<void(const int32_t* seq, int T, float* logits)>;
std::vector<int32_t> generate_simple(const LastLogits& last_logits, int V, int window,
                                     const std::vector<int32_t>& prompt,
                                     const GenerateOptions& options,
                                     const std::function<void(int32_t)>& on_token = {});

// Several prompts of any lengths at once: each is prefilled on its own, then
// every decode step runs one position of every unfinished sequence in one
// batched pass. Each sequence's tokens equal generate() on its prompt alone
// (sampling draws are keyed by position). on_token(i, t) sees token t of
// prompt i. With speculations, the prompts run one after another.
// stop_requested is checked after each token and ends that token's sequence.
std::vector<std::vector<int32_t>> generate_batch(
    Model<float>& model, const std::vector<std::vector<int32_t>>& prompts,
    const GenerateOptions& options, const std::function<void(int, int32_t)>& on_token = {},
    GenerateStats* stats = nullptr);

}  // namespace strata
