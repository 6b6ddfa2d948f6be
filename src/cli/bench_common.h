// What `strata bench ops` (cli/bench_ops.cpp) and `bench model` / `bench
// train` (cli/bench_step.cpp) share: the benchmark shapes and the timer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace strata::cli {

struct BenchModel {
  std::string name;
  int layers, C, F, H, Hkv, V, B, T;
  bool large = false;  // not in "all" (too large for a quick CPU run): by name only
  int D() const { return C / H; }
};

// Shapes of llama2.c's stories15M (6 layers, 288 wide) and stories110M
// (12 layers, 768 wide), with the Llama-2 vocabulary; a 24L-1024 (about 370M
// parameters, sequence 1024), where a CPU's matrix units get GEMMs large enough
// to fill them; and two GPU shapes with Llama-3's (16L-2048, 32L-4096); `which`
// is 288, 768, 1024, 2048, 4096 or all (the first two), B = tokens / T.
std::vector<BenchModel> bench_models(const std::string& which, int tokens);
// The model configuration of a benchmark shape (context: its sequence length).
LlamaConfig bench_config(const BenchModel& bm, int vocab, bool tied);
// Median seconds of `repeat` calls of fn, after at least 0.2 s of warm-up
// (workspaces, caches; on a shared VM the first milliseconds of a parallel
// burst can run several times slower).
double median_seconds(const std::function<void()>& fn, int repeat);

// The value of an --activations option: true for "bf16", false for "fp32";
// anything else is a usage error naming the command.
bool bf16_activations_option(const std::string& value, const std::string& command);

// `strata bench model` (train = false) and `strata bench train`.
int bench_step(int argc, char** argv, int first, bool train);

}  // namespace strata::cli
