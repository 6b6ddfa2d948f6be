// Models in and out of checkpoints: tensor references over a model's arenas
// and loading a ready-to-run model from a checkpoint file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace strata {

// One TensorRef per parameter (host memory: the CPU backend).
std::vector<TensorRef> param_refs(Model<float>& model);
// One TensorRef per tensor with optimizer state: first (`second` false) or
// second moments.
std::vector<TensorRef> moment_refs(Model<float>& model, AdamW<float>& opt, bool second);

struct CheckpointInfo {
  LlamaConfig config;
  LayerPlan plan;
  std::string recipe;
  nlohmann::json state;
  std::string tokenizer;  // sentencepiece model bytes ("" when absent)
};

// Reads config, plan, recipe, state and tokenizer bytes.
CheckpointInfo read_checkpoint_info(const CheckpointReader& reader);
// Builds a CPU float model from a checkpoint and loads its parameters.
std::unique_ptr<Model<float>> load_model(const std::string& path, CheckpointInfo* info = nullptr);

// Writes a checkpoint with the model's config, plan and parameters, the given
// tokenizer bytes and state, and no optimizer state (converted models).
void save_model(const std::string& path, Model<float>& model, const std::string& tokenizer,
                const nlohmann::json& state);

}  // namespace strata
