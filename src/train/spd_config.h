// The recipe of `strata spd <recipe.toml>` (SPD's Algorithm 1), parsed once
// into typed sections like a training recipe (train_config.h): [spd],
// [calibration], [b2b], [hg], [report]. The schema gives each key its type,
// default and help (`strata spd --help-recipe`); read_spd_config() reads and
// validates what the recipe alone decides, each error naming the file, line
// and key. What needs the model (the budget against its depth, the degree
// against its heads, the window against its context) is checked by the
// pipeline once the checkpoint's shape is known, through fail().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/recipe.h"
#include "train/spd.h"

namespace strata {

// Every key of an SPD recipe.
const std::vector<KeySpec>& spd_recipe_schema();

struct SpdConfig {
  const Recipe* recipe = nullptr;  // where each value came from (errors), the resolved TOML
  // [spd]
  std::string checkpoint;   // the standard checkpoint to convert
  std::string config_file;  // spd.config: its shape, to plan without it
  int degree = 2;
  int budget = -1;  // N_spd (-1: budget_percent of the layers)
  double budget_percent = 100;
  std::vector<int> blocks;  // spd.blocks: the blocks, or empty (the budget's least sensitive)
  double tau1 = 0, tau2 = 0;
  std::string out_dir;
  uint64_t seed = 1;
  // [calibration]
  std::string calibration_text;
  int64_t calibration_limit_bytes = 0;
  int samples = 0, seq_len = 0, calibration_batch = 0;
  int64_t capture_bytes = 0;
  // [b2b] (lr, epochs, batch; seed and progress are set per block)
  spd::DistillConfig distill;
  // [hg]
  int restarts = 1;
  // [report]
  std::string report_text;
  int64_t report_limit_bytes = 0;
  std::vector<std::string> tasks;
  int64_t task_limit = 0;
  std::vector<int> task_budgets;  // as written (checked against the budget later)
  bool ablation = true;

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    recipe->fail(key, message);
  }
};

// Reads and validates an SPD recipe (spd_recipe_schema()). Throws
// strata::Error naming the file and key. The result points to `recipe`.
SpdConfig read_spd_config(const Recipe& recipe);

}  // namespace strata
