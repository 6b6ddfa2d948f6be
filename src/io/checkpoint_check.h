// Whole-checkpoint checks for `strata inspect`: every tensor read and
// verified (checksum, finite values), and the metadata that no loadable
// checkpoint has (a config whose tensors are not in the file, a negative
// step). Each problem is one line without the "checkpoint <file>: " prefix;
// the loaders refuse the same things when they meet them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/config.h"

namespace strata {

struct TensorVerdict {
  int64_t tensors = 0;   // datasets of /params and the optimizer moments
  int64_t verified = 0;  // of which read and found sound (checksum, finite values)
  std::vector<std::string> problems;
};

// Reads every tensor of /params and /optimizer/exp_avg(_sq), one at a time,
// as a load does: a failed checksum, a non-finite value or an unreadable
// tensor is a problem (the reading goes on with the next tensor).
TensorVerdict verify_tensors(const CheckpointReader& reader);

using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// What the metadata claims that cannot be: a config whose tensors /params
// does not hold (missing, or of another shape), a plan the config's layer
// count refuses, a state 'step' or 'tokens_seen' that is not a non-negative
// integer (a resume refuses it), a negative optimizer step.
std::vector<std::string> metadata_problems(const LlamaConfig& cfg, const std::string& plan,
                                           const nlohmann::json& state, const TensorList& params,
                                           bool has_optimizer, int64_t optimizer_step);

}  // namespace strata
