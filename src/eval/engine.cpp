#include "eval/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/text.h"

namespace strata {

Scorer::Scorer(Model<float>& model, const Tokenizer& tokenizer, int batch_size,
               std::vector<int> exits)
    : model_(model),
      tok_(tokenizer),
      batch_size_(batch_size),
      max_len_(model.config().max_position_embeddings),
      exits_(std::move(exits)) {
  const int L = model.config().num_hidden_layers;
  STRATA_CHECK(batch_size >= 1, "eval: batch size must be >= 1, got ", batch_size);
  if (exits_.empty()) exits_.push_back(L);
  for (int e : exits_) STRATA_CHECK(e >= 1 && e <= L, "eval: exit layer ", e, " is outside 1..", L);
  STRATA_CHECK(tokenizer.bos_id() >= 0, "eval: the tokenizer has no BOS token");
  STRATA_CHECK(tokenizer.vocab_size() <= model.config().vocab_size, "eval: the tokenizer has ",
               tokenizer.vocab_size(), " pieces, the model ", model.config().vocab_size);
}

void Scorer::tokenize(const LlRequest& r, std::vector<int32_t>& context,
                      std::vector<int32_t>& cont) const {
  if (!r.pieces.empty()) {  // chat-rendered: piece by piece, as SFT training encodes
    context.clear();
    for (const ContextPiece& p : r.pieces) {
      if (p.eos) {
        STRATA_CHECK(tok_.eos_id() >= 0, "eval: a chat template needs an EOS token");
        context.push_back(tok_.eos_id());
      } else {
        const std::vector<int32_t> ids = tok_.encode(p.text);
        context.insert(context.end(), ids.begin(), ids.end());
      }
    }
    cont = r.continuation.empty() ? std::vector<int32_t>{} : tok_.encode(r.continuation);
    return;
  }
  // The harness's context.rstrip(): trailing whitespace moves to the continuation.
  std::string ctx = r.context, continuation = r.continuation;
  const size_t keep = python_strip_end(ctx);
  if (keep < ctx.size()) {
    continuation = ctx.substr(keep) + continuation;
    ctx.resize(keep);
  }
  const std::vector<int32_t> whole = tok_.encode(ctx + continuation);
  context = ctx.empty() ? std::vector<int32_t>{} : tok_.encode(ctx);
  const size_t n = std::min(context.size(), whole.size());
  cont.assign(whole.begin() + int64_t(n), whole.end());
}

void Scorer::run_rows(const std::vector<const Row*>& rows,
                      std::vector<std::vector<LlResult>>& out) {
  const int B = int(rows.size());
  int T = 1;
  int64_t positions = 0;
  for (const Row* r : rows) {
    T = std::max<int>(T, int(r->tokens.size()));
    positions += r->positions;
  }
  // Padding after each row's tokens: causal attention keeps it invisible.
  std::vector<int32_t> tokens(size_t(B) * T, 0);
  for (int b = 0; b < B; ++b)
    std::copy(rows[b]->tokens.begin(), rows[b]->tokens.end(), tokens.begin() + int64_t(b) * T);
  const int deepest = *std::max_element(exits_.begin(), exits_.end());
  model_.forward_hidden(tokens.data(), B, T, deepest);

  const int C = model_.config().hidden_size, V = model_.config().vocab_size;
  gathered_.resize(size_t(positions) * C);
  xn_.resize(size_t(positions) * C);
  logits_.resize(size_t(positions) * V);
  std::vector<int64_t> base(B + 1, 0);  // first gathered row of each input row
  for (int b = 0; b < B; ++b) base[b + 1] = base[b] + rows[b]->positions;
  std::vector<double> lse(positions);
  std::vector<int32_t> argmax(positions);
  ops::Backend<float>& be = model_.backend();
  const bool host = be.is_host();
  if (!host) {  // a device backend: gather and run the head there, read the logits back
    dev_gathered_.reserve(&be, size_t(positions) * C);
    dev_xn_.reserve(&be, size_t(positions) * C);
    dev_logits_.reserve(&be, size_t(positions) * V);
  }
  float* gathered = host ? gathered_.data() : dev_gathered_.data();
  for (size_t e = 0; e < exits_.size(); ++e) {
    // (The gather widens a model's bf16 activations: the head reads fp32.)
    const ops::ActIn<float> x = model_.hidden_state(exits_[e] - 1);
    for (int b = 0; b < B; ++b)
      be.copy(gathered + base[b] * C, x + (int64_t(b) * T + rows[b]->first) * C,
              int64_t(rows[b]->positions) * C);
    if (host) {
      model_.head_rows(gathered, positions, logits_.data(), xn_.data());
    } else {
      model_.head_rows(gathered, positions, dev_logits_.data(), dev_xn_.data());
      be.to_host(logits_.data(), dev_logits_.data(), positions * V);
    }
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < positions; ++g) {
      const float* l = logits_.data() + g * V;
      const int32_t arg = int32_t(std::max_element(l, l + V) - l);
      double z = 0;
      for (int v = 0; v < V; ++v) z += std::exp(double(l[v]) - double(l[arg]));
      lse[g] = double(l[arg]) + std::log(z);
      argmax[g] = arg;
    }
    // NaN or inf anywhere in a row makes its log-sum-exp non-finite: no score.
    for (int64_t g = 0; g < positions; ++g)
      if (!std::isfinite(lse[g])) [[unlikely]]
        fail(cat("the model's logits after layer ", exits_[e],
                 " are not finite: its weights overflow or are corrupt; no score is reported "
                 "(strata inspect shows the checkpoint's tensors)"));
    for (int b = 0; b < B; ++b)
      for (const Row::Target& t : rows[b]->targets) {
        LlResult& res = out[e][t.slot];
        for (int k = 0; k < rows[b]->positions; ++k) {
          const int64_t g = base[b] + k;
          res.logprob += double(logits_[size_t(g) * V + t.ids[k]]) - lse[g];
          res.greedy = res.greedy && argmax[g] == t.ids[k];
          ++res.tokens;
        }
      }
  }
}

std::vector<std::vector<LlResult>> Scorer::run_all(
    std::vector<Row>& rows, int64_t slots, const std::function<void(int64_t, int64_t)>& progress) {
  // Longest first (ties by input order): a deterministic order that batches similar lengths.
  std::vector<int64_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return rows[a].tokens.size() > rows[b].tokens.size();
  });
  std::vector<std::vector<LlResult>> results(exits_.size(), std::vector<LlResult>(slots));
  // The weights stay as they are for the whole evaluation: a kernel backend
  // converts each to bf16 once, not once a batch.
  const ops::HeldWeights<float> held(
      model_.backend(), model_.weights_resident() ? model_.params() : nullptr, model_.num_params());
  int64_t done = 0;
  for (size_t start = 0; start < order.size(); start += size_t(batch_size_)) {
    const size_t end = std::min(order.size(), start + size_t(batch_size_));
    std::vector<const Row*> batch;
    for (size_t k = start; k < end; ++k) {
      batch.push_back(&rows[order[k]]);
      done += int64_t(rows[order[k]].targets.size());
    }
    run_rows(batch, results);
    if (progress) progress(done, slots);
  }
  return results;
}

std::vector<std::vector<LlResult>> Scorer::loglikelihood(
    const std::vector<LlRequest>& requests, const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t n = int64_t(requests.size());
  std::vector<std::vector<int32_t>> ctxs(n), conts(n);
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) tokenize(requests[i], ctxs[i], conts[i]);
  std::vector<Row> rows;
  std::vector<uint8_t> cut(size_t(n), 0);
  std::map<std::vector<int32_t>, size_t> shared;  // inputs of one-token requests -> row
  std::map<std::pair<std::vector<int32_t>, std::vector<int32_t>>, int64_t> seen;
  std::vector<int64_t> same_as(size_t(n), -1);  // a duplicate's first request
  const int32_t bos = tok_.bos_id();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t>& ctx = ctxs[i];
    std::vector<int32_t>& cont = conts[i];
    STRATA_CHECK(!cont.empty(), "eval: request ", i, " has an empty continuation (context '",
                 requests[i].context.substr(0, 40), "...')");
    // The harness's left truncation: of BOS + context + continuation, the
    // last max_len + 1 tokens are kept (BOS falls off first, with the oldest
    // context) and the last one is only a target. A continuation longer than
    // max_len keeps its last max_len tokens as targets and is marked (the
    // harness asserts instead; evaluate.cpp leaves such examples out unless
    // asked to score them).
    std::vector<int32_t> inputs = {bos};
    inputs.insert(inputs.end(), ctx.begin(), ctx.end());
    inputs.insert(inputs.end(), cont.begin(), cont.end() - 1);
    cut[size_t(i)] = inputs.size() > size_t(max_len_);
    if (inputs.size() > size_t(max_len_)) inputs.erase(inputs.begin(), inputs.end() - max_len_);
    if (cont.size() > size_t(max_len_)) {
      cont.erase(cont.begin(), cont.end() - max_len_);
      cut[size_t(i)] |= 2;
    }
    // An identical request (the same inputs and targets, e.g. two choices
    // cut to the same last tokens) is scored once, so the two tie exactly.
    const auto [dup, fresh] = seen.try_emplace({inputs, cont}, i);
    if (!fresh) {
      same_as[size_t(i)] = dup->second;
      continue;
    }
    if (cont.size() == 1) {
      const auto it = shared.find(inputs);
      if (it != shared.end()) {
        rows[it->second].targets.push_back({i, cont});
        continue;
      }
      shared.emplace(inputs, rows.size());
    }
    Row r;
    r.first = int(inputs.size() - cont.size());
    r.positions = int(cont.size());
    r.tokens = std::move(inputs);
    r.targets.push_back({i, cont});
    rows.push_back(std::move(r));
  }
  const int64_t dups = std::count_if(same_as.begin(), same_as.end(), [](int64_t j) { return j >= 0; });
  std::function<void(int64_t, int64_t)> report;  // duplicates count as done at the end
  if (progress)
    report = [&](int64_t d, int64_t) { progress(d == n - dups ? n : d, n); };
  auto out = run_all(rows, n, report);
  for (auto& per_exit : out)
    for (int64_t i = 0; i < n; ++i) {
      if (same_as[size_t(i)] >= 0) per_exit[size_t(i)] = per_exit[size_t(same_as[size_t(i)])];
      per_exit[size_t(i)].truncated = cut[size_t(i)] != 0;
      per_exit[size_t(i)].long_continuation = (cut[size_t(i)] & 2) != 0;
    }
  return out;
}

std::vector<RollingResult> Scorer::rolling(const std::vector<int32_t>& ids, int window, int stride,
                                           bool full_last) {
  STRATA_CHECK(window >= 2 && window - 1 <= max_len_, "eval: perplexity window ", window,
               " must be in 2..", max_len_ + 1, " (inputs plus the last target)");
  STRATA_CHECK(stride >= 1 && stride <= window - 1, "eval: perplexity stride ", stride,
               " must be in 1..", window - 1, " (window - 1)");
  const int64_t n = int64_t(ids.size());
  std::vector<Row> spans;
  int64_t scored_to = 0;  // ids[0..scored_to] are scored (ids[0] is BOS, never scored)
  for (int64_t a = 0; scored_to < n - 1; a += stride) {
    const int64_t b = std::min(n, a + window);  // span ids[a, b)
    if (b - 1 <= scored_to) continue;
    // The last span is extended to the left to a full window, so its tokens
    // get as much context as the model takes (the harness's last window).
    if (b == n && full_last) a = std::max<int64_t>(0, n - window);
    Row r;
    r.tokens.assign(ids.begin() + a, ids.begin() + (b - 1));
    r.first = int(scored_to - a);
    r.positions = int(b - 1 - scored_to);
    r.targets.push_back({int64_t(spans.size()),
                         std::vector<int32_t>(ids.begin() + (scored_to + 1), ids.begin() + b)});
    spans.push_back(std::move(r));
    scored_to = b - 1;
  }
  const auto results = run_all(spans, int64_t(spans.size()), {});
  std::vector<RollingResult> out(exits_.size());
  for (size_t e = 0; e < exits_.size(); ++e)
    for (const LlResult& r : results[e]) {
      out[e].nll -= r.logprob;
      out[e].tokens += r.tokens;
    }
  return out;
}

}  // namespace strata
