// llama2.c model files (Karpathy's llama2.c): the legacy layout (version 0,
// as written by export.py's legacy_export / the original run.c reads) and the
// version-1 layout (magic "ak42", version 1, written by export.py's
// version1_export), with a shared or a separate classifier.
//
// llama2.c rotates interleaved pairs (q[2i], q[2i+1]) like Meta's checkpoints;
// strata stores Hugging Face's rotate-half layout, so the q and k projection
// rows are permuted on import (v is not): for each head, the rows
// [0, 2, 4, ..., D-2, 1, 3, ..., D-1] of the llama2.c matrix become rows
// [0 .. D) of the strata one (the permutation Hugging Face's
// convert_llama_weights_to_hf applies).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace strata {

struct Llama2cModel {
  int version = 0;               // 0: legacy, 1: "ak42" v1
  bool shared_classifier = true;
  LlamaConfig config;            // HF names; rope_theta 10000, rms_norm_eps 1e-5
  // Every tensor under its strata / Hugging Face name and shape, q/k permuted
  // to the rotate-half layout, in ParamLayout order.
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
};

// Reads a llama2.c checkpoint; detects the layout. Errors (one line, naming
// the file): unreadable, too short for its header, inconsistent sizes (file
// size must match the config exactly, up to the legacy file's unused
// freq_cis tables), unsupported version.
Llama2cModel read_llama2c(const std::string& path);

}  // namespace strata
