// Models in and out of checkpoints: tensor references over a model's arenas
// and loading a ready-to-run model from a checkpoint file.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/model.h"

namespace strata {

// One TensorRef per parameter (host memory: the CPU backend).
std::vector<TensorRef> param_refs(Model<float>& model);

struct CheckpointInfo {
  LlamaConfig config;
  LayerPlan plan;          // the plan the model runs (load_model: LoadOptions::plan if given)
  std::string saved_plan;  // the plan stored in the checkpoint
  std::string recipe;
  nlohmann::json state;
  std::string tokenizer;  // sentencepiece model bytes ("" when absent)
};

// Reads config, plan, recipe, state and tokenizer bytes.
CheckpointInfo read_checkpoint_info(const CheckpointReader& reader);

// Reads tensors of checkpoint group `group` (full tensors, whatever layout
// saved them) into this rank's parts of `layout` at dst(t).
// With `device` (a backend that is not host memory) dst(t) is device memory:
// each tensor is read on the host and copied there.
void read_tensor_parts(const CheckpointReader& reader, const std::string& group,
                       const ParamLayout& layout, const std::vector<int>& tensors,
                       const std::function<float*(int)>& dst,
                       ops::Backend<float>* device = nullptr);

struct LoadOptions {
  std::string plan;            // run under this plan ("": the checkpoint's)
  Communicator* tp = nullptr;  // a tensor-parallel group: load this rank's parts
  std::string device = "cpu";  // ops::make_backend's name (cpu, cuda, simt, auto)
  // Called with the checkpoint's configuration and the plan to run, after the
  // file's header is read and before the model is allocated (memory checks).
  std::function<void(const CheckpointInfo&)> before_alloc;
};
// Points `refs` (tensors in `be`'s memory) at host copies kept in `store`,
// for writing a checkpoint from a device backend; nothing on a host backend.
void stage_to_host(ops::Backend<float>& be, std::vector<TensorRef>& refs,
                   std::vector<std::vector<float>>& store);

// Builds a float model from a checkpoint and loads its parameters.
std::unique_ptr<Model<float>> load_model(const std::string& path, CheckpointInfo* info = nullptr,
                                         const LoadOptions& options = {});

// Writes a checkpoint with the model's config, plan and parameters, the given
// tokenizer bytes and state, and no optimizer state (converted models);
// parameters in bfloat16 where asked (shipped models).
void save_model(const std::string& path, Model<float>& model, const std::string& tokenizer,
                const nlohmann::json& state, bool bf16 = false, const std::string& recipe = "");

}  // namespace strata
