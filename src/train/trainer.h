// Recipe-driven training: pretraining from scratch, continual pretraining
// (model.init_from a checkpoint) and SFT (data.kind = "sft"), with gradient
// accumulation, freezing, periodic validation, atomic checkpoints with exact
// resume, metrics.jsonl and progress output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/recipe.h"

namespace strata {

// Every key a training recipe may set, with defaults and one-line help.
const std::vector<KeySpec>& train_recipe_schema();

struct TrainResult {
  std::string run_dir;
  int64_t steps_done = 0;       // optimizer steps completed in total (including resumed ones)
  double last_loss = 0;         // training loss of the last step
  double last_val_loss = -1;    // validation loss of the last evaluation (-1: none)
  double tokens_per_s = 0;      // mean training throughput of this invocation
  std::string last_checkpoint;  // "" when none was written
  std::vector<double> losses;   // training loss of every step run by this invocation
  bool interrupted = false;     // stopped by SIGINT/SIGTERM after saving a checkpoint
  int stop_signal = 0;          // the signal that stopped it (every rank reports the same)
  double step_s = 0;            // mean wall time per optimizer step of this invocation
  double comm_s = 0;            // of which waiting in collectives (not hidden by compute)
  double bubble = 0;            // pipeline: the measured bubble (StepResult::bubble)
  // Resident memory: this process's peak, and what the estimate said (the
  // estimate plus the program's own memory measured before the model).
  int64_t peak_rss_bytes = 0, estimate_bytes = 0;
};

// Runs the recipe. Progress goes to stderr; metrics to <run.dir>/metrics.jsonl.
// Under mpirun / srun every rank calls it: the ranks form the dp x tp grid of
// [parallelism], and world rank 0 prints, writes metrics and checkpoints.
// Throws strata::Error on bad input (recipe, data, checkpoint) before any
// training step, with a one-line message naming the file and key.
TrainResult train(const Recipe& recipe);

// `strata train --dry-run`: checks the recipe, its checkpoint and the model as
// train() does before its first write, and returns the memory estimate per
// process as TOML comment lines ("# memory: ..."). Writes nothing; throws the
// error train() would (a run that cannot fit included).
// With plan.device_bytes > 0: the layouts of the job on plan.world devices of
// that size (0: the run's own process count), plan.node_devices to a node,
// that fit, ranked (model/layouts.h), in place of this machine's memory
// check, then the recipe's own layout (plan.own: its parallelism section,
// which the caller set aside so that one process resolves the recipe) with
// its estimate; throws naming the smallest when none fits. When the recipe's
// own layout does not fit, `refusal` gets the one-line reason naming the best
// that does (the table is still returned). A model.init_from that is not on
// this machine is then planned from model.config.
struct RecipeLayout {
  int tp = 1, dp = 0, zero = 0, pp = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
};
struct PlanRequest {
  int64_t device_bytes = 0;  // 0: this machine's check, no planning
  int world = 0;             // devices (0: the run's processes)
  int node_devices = 8;      // devices per node
  int max_pp = 0;            // the largest pipeline degree searched (0: any)
  RecipeLayout own;
};
std::string train_dry_run(const Recipe& recipe, const PlanRequest& plan = {},
                          std::string* refusal = nullptr);

// Resolves `training.trainable` / `training.freeze` patterns to a per-tensor
// mask. Patterns are globs over tensor names ("model.layers.*.mlp.*",
// "lm_head.weight") or layer ranges "layers:A-B" (inclusive; "layers:3" for
// one layer). A pattern matching nothing is an error (`where` prefixes it).
std::vector<bool> resolve_trainable(const std::vector<std::string>& tensor_names,
                                    const std::vector<std::string>& trainable,
                                    const std::vector<std::string>& freeze,
                                    const std::string& where);

}  // namespace strata
