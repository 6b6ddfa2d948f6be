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
};

// Extends `prompt` (token ids, usually starting with BOS) and returns only the
// new tokens. `on_token` (optional) sees each token as it is chosen. When the
// sequence outgrows max_position_embeddings, the oldest tokens fall out of
// the window.
std::vector<int32_t> generate_simple(Model<float>& model, const std::vector<int32_t>& prompt,
                                     const GenerateOptions& options,
                                     const std::function<void(int32_t)>& on_token = {});

}  // namespace strata
