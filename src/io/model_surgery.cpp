// Model surgery (model_surgery.h): plan conversion, weights-only copies and
// Layer Parallelism's layer merge.
#include "io/model_surgery.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/text.h"
#include "ops/backend.h"

namespace strata {
namespace {

// model.layers.<k>.rest -> model.layers.<l>.rest; other names unchanged.
std::string layer_name(const std::string& name, int l) {
  const std::string key = "model.layers.";
  if (name.rfind(key, 0) != 0) return name;
  const size_t dot = name.find('.', key.size());
  return key + std::to_string(l) + name.substr(dot);
}

}  // namespace

void check_not_input(const std::string& in, const std::string& out, const std::string& what) {
  check_output_file(out, what, true);
  check_output_not_input(out, {in}, what);  // by identity: links and ./x count
}

void save_converted(const std::string& out, Model<float>& model, const CheckpointInfo& from,
                    const std::string& note, bool bf16, bool keep_recipe) {
  nlohmann::json state = from.state.is_object() ? from.state : nlohmann::json::object();
  state["converted_from"] = note;
  save_model(out, model, from.tokenizer, state, bf16, keep_recipe ? from.recipe : "");
}

PlanConversion convert_plan(const std::string& in, const std::string& out, const std::string& plan,
                            const std::string& what) {
  check_not_input(in, out, what);
  CheckpointInfo info;
  LoadOptions opt;
  opt.plan = plan;
  std::unique_ptr<Model<float>> model;
  try {
    model = load_model(in, &info, opt);
  } catch (const Error& e) {  // name the command and the checkpoint the plan is for
    const std::string msg = e.what();
    if (msg.rfind(in, 0) == 0) throw;  // the file's own error names it already
    fail(cat(what, " --plan: ", in, ": ", msg));
  }
  model->plan().check_not_benchmark_only(what);
  save_converted(out, *model, info, cat(in, " (plan ", info.saved_plan, ")"));
  return {model->plan().to_string(), info.saved_plan};
}

uint64_t write_weights(const std::string& in, const std::string& out, bool bf16,
                       const std::string& what) {
  check_not_input(in, out, what);
  CheckpointInfo info;
  auto model = load_model(in, &info);
  save_converted(out, *model, info, cat(in, " (weights only, ", bf16 ? "bf16" : "f32", ")"), bf16,
                 true);
  return uint64_t(std::filesystem::file_size(out));
}

std::unique_ptr<Model<float>> merge_layers(Model<float>& src, int begin, int end) {
  const int L = src.config().num_hidden_layers;
  STRATA_CHECK(src.plan().plain(), "merge_layers: the model runs plan '", src.plan().to_string(),
               "'; merging needs a standard model");
  STRATA_CHECK(begin >= 0 && end <= L && end - begin >= 2, "merge_layers: [", begin, ", ", end,
               ") must hold at least 2 of the model's layers 0..", L - 1);
  LlamaConfig c = src.config();
  c.num_hidden_layers = L - (end - begin) + 1;
  auto dst = std::make_unique<Model<float>>(c, ops::make_backend<float>());
  const ParamLayout &from = src.layout(), &to = dst->layout();
  for (int t = 0; t < int(to.tensors().size()); ++t) {
    const ParamInfo& info = to[t];
    float* d = dst->param(t);
    int l = -1;
    if (info.name.rfind("model.layers.", 0) == 0) l = std::stoi(info.name.substr(13));
    if (l < 0 || l < begin) {  // outside the layers, or below the range: the same tensor
      std::copy_n(src.param(from.find(info.name)), info.numel, d);
    } else if (l > begin) {  // above the range: shifted down
      std::copy_n(src.param(from.find(layer_name(info.name, l + (end - begin) - 1))), info.numel,
                  d);
    } else {  // the merged layer: the mean over [begin, end)
      std::fill_n(d, info.numel, 0.0f);
      for (int j = begin; j < end; ++j) {
        const float* p = src.param(from.find(layer_name(info.name, j)));
        for (int64_t i = 0; i < info.numel; ++i) d[i] += p[i];
      }
      for (int64_t i = 0; i < info.numel; ++i) d[i] /= float(end - begin);
    }
  }
  return dst;
}

int merge_layers(const std::string& in, const std::string& out, int begin, int end,
                 const std::string& what, const std::string& range) {
  check_not_input(in, out, what);
  CheckpointInfo info;
  auto src = load_model(in, &info);
  STRATA_CHECK(info.plan.plain(), what, ": ", in, " runs plan '", info.plan.to_string(),
               "'; merging needs a standard model");
  const int L = src->config().num_hidden_layers;
  STRATA_CHECK(begin >= 0 && end <= L && end - begin >= 2, what, ": ",
               range.empty() ? cat("layers ", begin, ":", end) : range,
               " must hold at least 2 of the model's layers 0..", L - 1);
  auto dst = merge_layers(*src, begin, end);
  save_converted(out, *dst, info, cat(in, " (layers ", begin, "..", end - 1, " merged)"));
  return L;
}

}  // namespace strata
