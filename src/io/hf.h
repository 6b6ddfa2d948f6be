// Hugging Face Llama model directories <-> strata models.
//
// A directory holds config.json (LlamaConfig), the weights as
// model.safetensors or shards listed by model.safetensors.index.json (F32,
// F16 or BF16), optionally tokenizer.model (sentencepiece) or tokenizer.json
// (byte-level BPE: Llama 3 and later) and generation_config.json. Tensor names and shapes are the
// same on both sides (strata keeps Hugging Face's names and its rotate-half q/k layout).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"

namespace strata {

struct HfImportInfo {
  // tokenizer.model bytes, else tokenizer.json bytes ("" when the directory
  // has neither), and the file they came from.
  std::string tokenizer, tokenizer_file;
  std::string weights;  // the weights file or index that was read
};

// Builds a CPU float model from a Hugging Face directory. Errors (one line,
// naming the file and the tensor or field): missing config.json or weights,
// unsupported config (see LlamaConfig::from_json), a tensor missing or of the
// wrong shape, a tensor strata does not know (other architectures).
std::unique_ptr<Model<float>> import_hf(const std::string& dir, HfImportInfo* info = nullptr);

struct HfExportOptions {
  std::string dtype = "F32";  // "F32", "BF16" or "F16"
  uint64_t max_shard_bytes = uint64_t(5) << 30;
};

// Writes config.json (with the layer plan under "strata"), generation_config.json,
// the weights (model.safetensors, sharded above max_shard_bytes) and, when
// given, the tokenizer: a sentencepiece model as tokenizer.model and its
// tokenizer.json form, a tokenizer.json as it is; with tokenizer_config.json
// and special_tokens_map.json. Refuses (with the reason) a model whose layer plan
// is not a plain Llama. Tied embeddings export without lm_head.weight, as
// transformers does.
void export_hf(Model<float>& model, const std::string& tokenizer_bytes, const std::string& dir,
               const HfExportOptions& options);

}  // namespace strata
