#include "io/model_io.h"

#include <algorithm>

#include "core/log.h"
#include "model/sharding.h"
#include "ops/backend.h"

namespace strata {

std::vector<TensorRef> param_refs(Model<float>& model) {
  std::vector<TensorRef> refs;
  const auto& tensors = model.layout().tensors();
  for (size_t i = 0; i < tensors.size(); ++i)
    refs.push_back(TensorRef{tensors[i].name, tensors[i].shape, model.param(int(i))});
  return refs;
}

CheckpointInfo read_checkpoint_info(const CheckpointReader& reader) {
  CheckpointInfo info;
  info.config = LlamaConfig::from_json(reader.config(), reader.path() + " (config)");
  info.plan = LayerPlan::parse(reader.plan(), info.config.num_hidden_layers);
  info.saved_plan = info.plan.to_string();
  info.recipe = reader.recipe();
  info.state = reader.state();
  info.tokenizer = reader.tokenizer();
  return info;
}

void read_tensor_parts(const CheckpointReader& reader, const std::string& group,
                       const ParamLayout& layout, const std::vector<int>& tensors,
                       const std::function<float*(int)>& dst, ops::Backend<float>* device) {
  const bool staged = device && !device->is_host();
  if (layout.tp() == 1 && !staged) {
    std::vector<TensorRef> refs;
    for (int t : tensors) refs.push_back(TensorRef{layout[t].name, layout[t].shape, dst(t)});
    reader.read(group, refs);
    return;
  }
  std::vector<float> full, part;
  for (int t : tensors) {
    full.resize(size_t(full_numel(layout[t])));
    reader.read(group, {TensorRef{layout[t].name, layout[t].full_shape, full.data()}});
    if (!staged) {
      slice_full_tensor(layout, t, full.data(), dst(t));
      continue;
    }
    part.resize(size_t(layout[t].numel));
    slice_full_tensor(layout, t, full.data(), part.data());
    device->from_host(dst(t), part.data(), layout[t].numel);
  }
}

void stage_to_host(ops::Backend<float>& be, std::vector<TensorRef>& refs,
                   std::vector<std::vector<float>>& store) {
  if (be.is_host()) return;
  for (TensorRef& ref : refs) {
    int64_t numel = 1;
    for (int64_t dim : ref.shape) numel *= dim;
    store.emplace_back(static_cast<size_t>(numel));  // moving the outer vector keeps inner data
    be.to_host(store.back().data(), ref.data, numel);
    ref.data = store.back().data();
  }
}

std::unique_ptr<Model<float>> load_model(const std::string& path, CheckpointInfo* info_out,
                                         const LoadOptions& o) {
  const CheckpointReader reader(path);
  CheckpointInfo info = read_checkpoint_info(reader);
  if (!o.plan.empty()) info.plan = LayerPlan::parse(o.plan, info.config.num_hidden_layers);
  // An SPD checkpoint's distilled blocks were tuned for one degree.
  if (info.state.is_object() && info.state.contains("spd")) {
    const int tuned = info.state["spd"].value("degree", 0);
    const bool spd_blocks =
        std::count(info.plan.kinds.begin(), info.plan.kinds.end(), LayerKind::Spd) > 0;
    const int degree = int(info.plan.number("spd_degree", 2));
    if (tuned > 0 && (!spd_blocks || degree != tuned))
      log::warn(path, ": its SPD blocks were distilled for spd_degree ", tuned, "; plan '",
                info.plan.to_string(), "' runs ",
                spd_blocks ? cat("spd_degree ", degree) : std::string("no spd block"));
  }
  if (o.before_alloc) o.before_alloc(info);
  auto model = std::make_unique<Model<float>>(info.config, info.plan,
                                              ops::make_backend<float>(o.device), o.tp);
  std::vector<int> all(model->layout().tensors().size());
  for (size_t t = 0; t < all.size(); ++t) all[t] = int(t);
  read_tensor_parts(
      reader, "params", model->layout(), all, [&](int t) { return model->param(t); },
      &model->backend());
  if (info_out) *info_out = std::move(info);
  return model;
}

void save_model(const std::string& path, Model<float>& model, const std::string& tokenizer,
                const nlohmann::json& state, bool bf16, const std::string& recipe) {
  CheckpointData d;
  d.params_bf16 = bf16;
  d.recipe = recipe;
  d.config = model.config().to_json();
  d.plan = model.plan().to_string();
  d.state = state;
  d.tokenizer = tokenizer;
  d.params = param_refs(model);
  std::vector<std::vector<float>> host;
  stage_to_host(model.backend(), d.params, host);
  write_checkpoint(path, d);
}

}  // namespace strata
