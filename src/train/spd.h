// SPD's offline tools (Han-Byul Kim et al., "SPD: Sync-Point Drop for
// Efficient Tensor Parallelism of Large Language Models", section 4.2): calibration windows, the
// original model's block inputs and outputs, block-to-block distillation of one block in SPD mode
// (B2B), and attention head grouping (HG): the distance between heads' attention scores, balanced
// anticlustering of the heads into the degree's groups, the matching of groups to MLP slices by
// output norm, and the permutation of the block's heads that leaves the standard block's output
// unchanged. `strata spd <recipe.toml>` runs them as the paper's Algorithm 1
// (train/spd_pipeline.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/memory.h"
#include "model/model.h"

namespace strata::spd {

// n windows of seq + 1 tokens at seeded random offsets of `ids` (the GPTQ /
// OmniQuant calibration draw): [n, seq + 1], inputs = [.., :seq], targets =
// [.., 1:]. Throws when ids has fewer than seq + 1 tokens.
std::vector<int32_t> calibration_windows(const std::vector<int32_t>& ids, int n, int seq,
                                         uint64_t seed);

// Token perplexity exp(mean CE) of the model (its current plan) on windows
// [n, seq + 1], `batch` windows per forward.
double window_perplexity(Model<float>& m, const std::vector<int32_t>& windows, int n, int seq,
                         int batch);

// The input x_{2l} and output x_{2l+2} of block l in the model's forward on
// the windows' inputs: host [n * seq * C] each.
struct BlockIO {
  std::vector<float> x, y;
};
// Captures BlockIO of every layer in `layers` (one forward pass per batch).
std::vector<BlockIO> capture_blocks(Model<float>& m, const std::vector<int32_t>& windows, int n,
                                    int seq, int batch, const std::vector<int>& layers);

// One layer's parameters, a contiguous range of the arena (host copy), and
// its number of values.
std::vector<float> layer_snapshot(Model<float>& m, int layer);
int64_t layer_numel(Model<float>& m, int layer);
void restore_layer(Model<float>& m, int layer, const std::vector<float>& snapshot);

// ------------------------------------------------------------------ memory
// What `strata spd` holds at its peak for a model of `cfg` at degree g (one
// process, on the CPU backend): the model's weights, the activations of the
// calibration passes (batch cal_batch, recomputation "full": a forward keeps
// the residual streams only) and the head's workspace; the block model a
// distillation trains (weights, gradients, moments, activations at the B2B
// batch); the captured block inputs and outputs of `capture_layers` blocks
// (as many as capture_bytes holds, at least one and at most the budget), two
// copies of a block's weights (the distilled ones live in files, the
// originals in the checkpoint) and head grouping's attention probabilities.
struct PipelineMemory {
  MemoryEstimate memory;
  int capture_layers = 1;
};
PipelineMemory pipeline_memory(const LlamaConfig& cfg, int degree, int n, int seq, int cal_batch,
                               int b2b_batch, int budget, int64_t capture_bytes);

// ------------------------------------------------------------- distillation
struct DistillConfig {
  double lr = 5e-5;  // the paper's LLaMA2 rate
  int epochs = 10;
  int batch = 1;  // windows per step (the paper: one 2048-token sample)
  uint64_t seed = 1;
  bool progress = true;  // a line per epoch on stderr
};
struct DistillResult {
  double initial_mse = 0;         // mean MSE over all windows before any step
  double final_mse = 0;           // the same after the last step
  double first_step_mse = 0;      // the loss of the first step (its batch, before updating)
  std::vector<double> epoch_mse;  // mean of each epoch's step losses
  int64_t steps = 0;
  double seconds = 0;
};
// Trains block `layer` of m (which must run it as an spd unit: the student)
// so that its output on io.x matches io.y (the teacher): MSE over all
// elements, AdamW (beta 0.9/0.999, no weight decay, no clipping, constant
// rate), the windows reshuffled each epoch. The block trains in a model of
// its own (block_model), whose weights are copied back: only that block's
// tensors of m change, and m needs no gradient arena.
DistillResult distill_block(Model<float>& m, int layer, const BlockIO& io, int n, int seq,
                            const DistillConfig& config);
// A one-layer model holding block `layer` of m (its kind, plan options and
// weights; a two-token tied vocabulary that block_forward never reads), on a
// backend of m's device: what distill_block trains.
std::unique_ptr<Model<float>> block_model(Model<float>& m, int layer);
// The MSE of block `layer` as the model runs it against io.y (no training).
double block_mse(Model<float>& m, int layer, const BlockIO& io, int n, int seq, int batch);

// ------------------------------------------------------------ head grouping
// The units HG moves are the key/value heads with their query heads (the
// query heads of one KV head stay together under grouped-query attention).
struct HeadGrouping {
  int degree = 0, units = 0;
  // Distance between units: sqrt of the summed squared differences of their
  // query heads' attention probabilities over the windows.
  std::vector<std::vector<double>> distance;
  std::vector<std::vector<int>> groups;        // the anticlustered groups of units
  double spread_before = 0, spread_after = 0;  // within-group distance sums: identity, chosen
  // score[i][m]: the summed Frobenius norm over windows of MLP slice m's
  // output on its SPD input from group i's heads (x + P_{A_i} + b).
  std::vector<std::vector<double>> score;
  std::vector<int> slice_of_group;  // the matching that maximises the summed score
  std::vector<int> unit_order;      // new unit p is old unit unit_order[p]
};
// Measures block `layer` of m (its weights as they are) on the windows'
// block inputs x (host [n * seq * C]) and chooses the grouping at `degree`.
HeadGrouping group_heads(Model<float>& m, int layer, int degree, const std::vector<float>& x, int n,
                         int seq, uint64_t seed, int restarts = 16);
// Reorders the units of block `layer`: q/k/v rows (and biases) head by head,
// o_proj columns. The standard block computes the same function.
void permute_heads(Model<float>& m, int layer, const std::vector<int>& unit_order);

// Balanced anticlustering: `groups` groups of equal size maximising the summed
// within-group distance (exchange heuristic from seeded random starts).
std::vector<std::vector<int>> anticluster(const std::vector<std::vector<double>>& distance,
                                          int groups, uint64_t seed, int restarts);
double within_group_sum(const std::vector<std::vector<double>>& distance,
                        const std::vector<std::vector<int>>& groups);
// The assignment row -> column maximising the summed score (Hungarian
// algorithm), and the same by trying every permutation (n <= 9).
std::vector<int> best_assignment(const std::vector<std::vector<double>>& score);
std::vector<int> best_assignment_exhaustive(const std::vector<std::vector<double>>& score);

}  // namespace strata::spd
