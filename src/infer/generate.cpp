#include "infer/generate.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

std::vector<int32_t> generate_simple(Model<float>& model, const std::vector<int32_t>& prompt,
                                     const GenerateOptions& o,
                                     const std::function<void(int32_t)>& on_token) {
  STRATA_CHECK(!prompt.empty(), "generate: the prompt is empty (it needs at least BOS)");
  const int V = model.config().vocab_size, window = model.config().max_position_embeddings;
  std::vector<int32_t> seq = prompt, out;
  std::vector<float> logits;
  for (int i = 0; i < o.max_new_tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, int64_t(seq.size()) - window);
    const int T = int(seq.size() - start);
    logits.resize(size_t(T) * V);
    model.forward_logits(seq.data() + start, 1, T, logits.data());
    const int32_t next = sample_token(logits.data() + size_t(T - 1) * V, V, o.sampling, seq.size());
    seq.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
    if (next == o.eos_id) break;
  }
  return out;
}

}  // namespace strata
