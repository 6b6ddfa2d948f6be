// The scoring engine: loglikelihoods of (context, continuation) requests and
// rolling perplexity of documents, at one or several exit layers, with
// lm-evaluation-harness tokenisation so numbers are comparable.
//
// Tokenisation of a request (as the harness does): trailing whitespace of the
// context (Python's rstrip) moves to the front of the continuation; the
// continuation's tokens are encode(context + continuation) past the tokens of
// encode(context). The sequence is BOS + context tokens + continuation tokens;
// when it does not fit the model's context, its last max_len + 1 tokens are
// kept (BOS falls off first, with the oldest context), the harness's rule. A
// chat-rendered request (LlRequest::pieces) encodes each piece on its own, as
// SFT training does, and its continuation on its own.
//
// Requests are sorted by length (longest first) and run in padded batches of
// `batch_size` rows; each row's positions only see their own row (causal
// attention), so results do not depend on the batch size beyond float
// rounding of the GEMMs. Requests with identical inputs (same context,
// one-token continuations) share one row.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/task.h"
#include "model/model.h"

namespace strata {

struct LlResult {
  double logprob = 0;      // sum of log P(continuation token) over the continuation
  bool greedy = true;      // every continuation token is the argmax at its position
  int tokens = 0;          // continuation tokens scored
  bool truncated = false;  // the request did not fit the context: cut from the left
  // The continuation alone is longer than the context: only its last
  // max_len tokens were scored (the harness refuses such a request).
  bool long_continuation = false;
};

struct RollingResult {
  double nll = 0;      // summed negative log-likelihood of the scored tokens
  int64_t tokens = 0;  // tokens scored (every token of the text, BOS excluded)
};

class Scorer {
 public:
  // `exits`: exit layers to score at (1..L); empty means the full model. A
  // forward runs once up to the deepest exit and the head is applied to each
  // exit's stream.
  Scorer(Model<float>& model, const Tokenizer& tokenizer, int batch_size, std::vector<int> exits);

  const std::vector<int>& exits() const { return exits_; }
  int max_len() const { return max_len_; }

  // results[e][i]: request i at exit e. `progress(done, total)` is called
  // after every batch.
  std::vector<std::vector<LlResult>> loglikelihood(
      const std::vector<LlRequest>& requests,
      const std::function<void(int64_t, int64_t)>& progress = {});

  // Token-level rolling perplexity of `ids` (the caller puts BOS first; it is
  // never scored): spans of `window` tokens (inputs plus the last target,
  // window - 1 <= max_len) advance by `stride` (1..window-1); every token is
  // scored exactly once, by the first span that predicts it; the span that
  // reaches the end starts at n - window (a full context, as the harness's
  // last rolling window; full_last = false keeps it where the stride puts it,
  // as chunked evaluation such as llama2.c's does). stride = window
  // - 1 is non-overlapping scoring with one token of context carried; smaller
  // strides give later tokens more context. Result per exit.
  std::vector<RollingResult> rolling(const std::vector<int32_t>& ids, int window, int stride,
                                     bool full_last = true);

  // The harness's split of a request into token ids (exposed for tests).
  void tokenize(const LlRequest& r, std::vector<int32_t>& context,
                std::vector<int32_t>& cont) const;

 private:
  // One model input row. Requests whose inputs coincide (the choices of a
  // multiple-choice question with one-token answers, e.g. MMLU's " A".." D")
  // share a row: one forward pass, each request reading its own targets.
  struct Row {
    std::vector<int32_t> tokens;  // model inputs (BOS + ...), without the last target
    int first = 0;                // input position predicting the first target
    int positions = 0;            // scored positions: first .. first + positions - 1
    struct Target {
      int64_t slot;              // output index (request or span)
      std::vector<int32_t> ids;  // `positions` target ids
    };
    std::vector<Target> targets;
  };
  // Runs rows (<= batch_size) and adds per-exit (logprob, greedy) of every
  // target set to out[e][slot].
  void run_rows(const std::vector<const Row*>& rows, std::vector<std::vector<LlResult>>& out);
  // Sorts rows by length, runs them in batches, returns out[e][slot].
  std::vector<std::vector<LlResult>> run_all(std::vector<Row>& rows, int64_t slots,
                                             const std::function<void(int64_t, int64_t)>& progress);

  Model<float>& model_;
  const Tokenizer& tok_;
  int batch_size_, max_len_;
  std::vector<int> exits_;
  std::vector<float> gathered_, logits_, xn_;
  // Device backends: the gathered rows, normed rows and logits on the device.
  ops::DeviceBuffer<float> dev_gathered_, dev_xn_, dev_logits_;
};

}  // namespace strata
