// `strata bench generate` as a library: greedy generation of fixed length
// from a set of prompts in each mode asked for (plain KV-cache decoding, early
// exit, self-speculative decoding), repeated, timed and summed; the table of
// the results; and the self-speculative cost model (infer/spec_cost.h) set
// against the measurement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/generate.h"
#include "model/model.h"

namespace strata {

struct GenerateBenchOptions {
  int max_new_tokens = 128;       // per prompt: every mode generates as many (no EOS)
  int exit_layer = 0;             // > 0: also early exit at this layer
  bool self_speculative = false;  // and self-speculative decoding (needs exit_layer)
  int speculations = 4;           // drafts per self-speculative round
  int repeat = 3;                 // runs per prompt and mode
  // Decode steps as recorded graphs (GenerateOptions::graphs); with
  // eager_too, plain decoding is measured a second time without them.
  bool graphs = true, eager_too = false;
  ops::Dtype kv_cache = ops::Dtype::F32;  // GenerateOptions::kv_cache
};

struct GenerateBenchMode {
  std::string name;  // "plain", "early exit E=4", "self-speculative E=4 d=4"
  GenerateOptions options;
  std::vector<double> prefill, decode;        // tokens/s of every run
  GenerateStats total;                        // every run summed
  std::vector<std::vector<int32_t>> outputs;  // per prompt, its last run's tokens
};

// plain, then early exit and self-speculative decoding where asked.
std::vector<GenerateBenchMode> generate_bench_modes(const GenerateBenchOptions& options);

// Runs every mode on every prompt `repeat` times.
void run_generate_bench(Model<float>& model, const std::vector<std::vector<int32_t>>& prompts,
                        std::vector<GenerateBenchMode>& modes, int repeat);

// Medians of the prefill and decode speeds, the speed-up over plain decoding
// (total tokens over total time), and for self-speculation the acceptance, the
// tokens per full-model pass and whether its greedy output equals plain's.
std::string generate_bench_table(const std::vector<GenerateBenchMode>& modes);

// Bytes of weights a decoded token reads: every layer, the final norm and
// the head, in fp32 or as bf16 copies.
double decode_weight_bytes(const LlamaConfig& c, bool bf16);

// The cost model from the three modes' measured times against the measured
// speed-up, and projected onto a decode bound by reading the weights (`bytes`
// of them at `bandwidth` bytes/s) with `assume_tokens` tokens per round (0:
// the measured ones).
std::string spec_cost_report(const GenerateBenchMode& plain, const GenerateBenchMode& early,
                             const GenerateBenchMode& spec, const LlamaConfig& c, double bytes,
                             double bytes_per_weight, double bandwidth, double assume_tokens);

}  // namespace strata
