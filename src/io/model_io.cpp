#include "io/model_io.h"

#include "ops/backend.h"

namespace strata {

std::vector<TensorRef> param_refs(Model<float>& model) {
  std::vector<TensorRef> refs;
  const auto& tensors = model.layout().tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    refs.push_back(TensorRef{tensors[i].name, tensors[i].shape, model.param(int(i))});
  return refs;
}

std::vector<TensorRef> moment_refs(Model<float>& model, AdamW<float>& opt, bool second) {
  std::vector<TensorRef> refs;
  const auto& tensors = model.layout().tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (opt.has_state(int(i)))
      refs.push_back(TensorRef{tensors[i].name, tensors[i].shape,
                               second ? opt.exp_avg_sq(int(i)) : opt.exp_avg(int(i))});
  return refs;
}

CheckpointInfo read_checkpoint_info(const CheckpointReader& reader) {
  CheckpointInfo info;
  info.config = LlamaConfig::from_json(reader.config(), reader.path() + " (config)");
  info.plan = LayerPlan::parse(reader.plan(), info.config.num_hidden_layers);
  info.recipe = reader.recipe();
  info.state = reader.state();
  info.tokenizer = reader.tokenizer();
  return info;
}

std::unique_ptr<Model<float>> load_model(const std::string& path, CheckpointInfo* info_out) {
  const CheckpointReader reader(path);
  CheckpointInfo info = read_checkpoint_info(reader);
  auto model =
      std::make_unique<Model<float>>(info.config, info.plan, ops::make_backend<float>());
  reader.read("params", param_refs(*model));
  if (info_out) *info_out = std::move(info);
  return model;
}

void save_model(const std::string& path, Model<float>& model, const std::string& tokenizer,
                const nlohmann::json& state) {
  CheckpointData d;
  d.config = model.config().to_json();
  d.plan = model.plan().to_string();
  d.state = state;
  d.tokenizer = tokenizer;
  d.params = param_refs(model);
  write_checkpoint(path, d);
}

}  // namespace strata
