#include "io/hf.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/text.h"
#include "io/hf_tokenizer.h"
#include "io/safetensors.h"
#include "model/memory.h"
#include "ops/backend.h"

namespace strata {
namespace fs = std::filesystem;

// transformers writes its version into config.json; see export_hf.
constexpr const char* kHfFormatVersion = "4.57.6";

namespace {

// A tied model that still carries lm_head.weight: transformers ignores the
// copy (the head is the embedding), and so does strata, but not silently
// when the copy differs.
void check_tied_head(const SafetensorsModel& weights, Model<float>& model, const std::string& dir) {
  const int e = model.layout().find("model.embed_tokens.weight");
  if (e < 0) return;
  const ParamInfo& t = model.layout()[e];
  std::vector<float> head(size_t(t.numel));
  try {
    weights.read_f32("lm_head.weight", t.shape, head.data());
  } catch (const Error&) {
    log::warn(dir,
              ": config.json ties the head to the embedding (tie_word_embeddings: true); "
              "lm_head.weight, of another shape, is ignored");
    return;
  }
  if (!std::equal(head.begin(), head.end(), model.param(e)))
    log::warn(dir,
              ": config.json ties the head to the embedding (tie_word_embeddings: true), "
              "but lm_head.weight differs from model.embed_tokens.weight: it is ignored, as "
              "transformers does (set tie_word_embeddings: false to use it)");
}

}  // namespace

std::unique_ptr<Model<float>> import_hf(const std::string& dir, HfImportInfo* info) {
  const std::string config_path = dir + "/config.json";
  STRATA_CHECK(fs::is_directory(dir), dir,
               ": not a directory (expected a Hugging Face model directory)");
  const std::string text = read_file(config_path, "config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(cat(config_path, ": not valid JSON (", e.what(), ")"));
  }
  if (j.contains("model_type") && j["model_type"].is_string())
    STRATA_CHECK(j["model_type"] == "llama", config_path, ": model_type '",
                 one_line(j["model_type"].get<std::string>()), "' is not supported (llama)");
  const LlamaConfig cfg = LlamaConfig::from_json(j, config_path);
  const SafetensorsModel weights = SafetensorsModel::open_dir(dir);

  // Before anything is allocated: the model config.json describes must fit in
  // memory, and every tensor it implies must be in the weights' headers (a
  // config claiming more layers than the weights hold stops here).
  check_memory(estimate_memory(cfg, LayerPlan{}, MemoryUse{}), host_memory_available(), 1,
               cat(config_path, " (", cfg.num_hidden_layers, " layers, hidden ", cfg.hidden_size,
                   ") describes a model that"),
               "check num_hidden_layers, hidden_size and intermediate_size against the weights, "
               "or use a machine with more memory");
  {
    const ParamLayout expected(cfg);
    for (const ParamInfo& t : expected.tensors())
      STRATA_CHECK(weights.find(t.name), dir, ": tensor '", t.name,
                   "' is missing from the weights (config.json: ", cfg.num_hidden_layers,
                   " layers)");
  }
  auto model = std::make_unique<Model<float>>(cfg, ops::make_backend<float>());
  const ParamLayout& layout = model->layout();
  std::set<std::string> used;
  ProgressMeter progress(cat("convert hf: reading ", dir), uint64_t(model->num_params()) * 4);
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const ParamInfo& t = layout[int(i)];
    weights.read_f32(t.name, t.shape, model->param(int(i)));
    used.insert(t.name);
    progress.add(uint64_t(t.numel) * 4);  // as float32
  }
  for (const std::string& name : weights.names()) {
    if (used.count(name)) continue;
    // Tied models may still carry a copy of the head; old exports carry the
    // rotary frequencies. Anything else belongs to a model strata cannot run.
    if (name == "lm_head.weight" && cfg.tie_word_embeddings) {
      check_tied_head(weights, *model, dir);
      continue;
    }
    if (name.size() > 20 && name.compare(name.size() - 20, 20, "rotary_emb.inv_freq") == 0)
      continue;
    fail(cat(weights.file_of(name), ": tensor '", name, "' is not part of a ",
             cfg.attention_bias ? "" : "bias-free ", "Llama model with this config.json"));
  }
  if (info) {
    // open_dir reads model.safetensors when present, else the index.
    info->weights = fs::exists(dir + "/model.safetensors") ? dir + "/model.safetensors"
                                                           : dir + "/model.safetensors.index.json";
    // The sentencepiece model where there is one (a strata export has both
    // files), else the tokenizer.json (Llama 3 and later ship only that).
    info->tokenizer =
        fs::exists(dir + "/tokenizer.model")  ? read_file(dir + "/tokenizer.model", "tokenizer")
        : fs::exists(dir + "/tokenizer.json") ? read_file(dir + "/tokenizer.json", "tokenizer")
                                              : "";
    info->tokenizer_file = info->tokenizer.empty()                ? ""
                           : fs::exists(dir + "/tokenizer.model") ? dir + "/tokenizer.model"
                                                                  : dir + "/tokenizer.json";
  }
  return model;
}

void export_hf(Model<float>& model, const std::string& tokenizer_bytes, const std::string& dir,
               const HfExportOptions& o) {
  const LayerPlan& plan = model.plan();
  STRATA_CHECK(plan.plain(), "export hf: the model runs plan '", plan.to_string(),
               "'; a Hugging Face Llama runs every layer as a standard one, so it would compute "
               "something else (export a checkpoint with a standard plan)");
  STRATA_CHECK(o.dtype == "F32" || o.dtype == "BF16" || o.dtype == "F16",
               "export hf: unknown dtype '", o.dtype, "' (F32, BF16 or F16)");
  fs::create_directories(dir);
  const LlamaConfig& c = model.config();
  nlohmann::json cfg = c.to_json();
  cfg["torch_dtype"] = o.dtype == "F32" ? "float32" : o.dtype == "BF16" ? "bfloat16" : "float16";
  cfg["use_cache"] = true;
  cfg["pretraining_tp"] = 1;
  cfg["strata"] = {{"plan", plan.to_string()}, {"version", STRATA_VERSION}};
  std::vector<SafeTensorWrite> tensors;
  for (size_t i = 0; i < model.layout().tensors().size(); ++i) {
    const ParamInfo& t = model.layout()[int(i)];
    tensors.push_back(SafeTensorWrite{t.name, t.shape, model.param(int(i))});
  }
  // The files follow the format of this transformers version, the oldest the
  // export was checked with (tests/fixtures/check_hf_export.py; 5.x reads it too).
  cfg["transformers_version"] = kHfFormatVersion;
  nlohmann::json gen = {{"bos_token_id", c.bos_token_id},
                        {"eos_token_id", cfg["eos_token_id"]},  // one id or the list
                        {"transformers_version", kHfFormatVersion}};
  HfTokenizerFiles tok;
  if (!tokenizer_bytes.empty())
    tok = make_hf_tokenizer_files(tokenizer_bytes, c.max_position_embeddings, "of the checkpoint");
  // A pad piece where the tokenizer has one; generation pads with EOS (as SFT
  // batches do) where it has none.
  cfg["pad_token_id"] = tok.pad_token_id >= 0 ? nlohmann::json(tok.pad_token_id) : nullptr;
  gen["pad_token_id"] = tok.pad_token_id >= 0 ? tok.pad_token_id : c.eos_token_id;
  write_safetensors_model(dir, tensors, o.dtype, o.max_shard_bytes, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
  write_file_atomic(dir + "/generation_config.json", gen.dump(2) + "\n");
  if (!tokenizer_bytes.empty()) {
    if (tok.tokenizer_json != tokenizer_bytes)  // a sentencepiece model: both forms
      write_file_atomic(dir + "/tokenizer.model", tokenizer_bytes);
    write_file_atomic(dir + "/tokenizer.json", tok.tokenizer_json);
    write_file_atomic(dir + "/tokenizer_config.json", tok.tokenizer_config_json);
    write_file_atomic(dir + "/special_tokens_map.json", tok.special_tokens_map_json);
  }
}

}  // namespace strata
