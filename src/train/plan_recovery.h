// The recovery of a plan `strata plan search` chose: recipes that retrain
// only what the plan changed, and a script that runs them and scores the
// plan before and after.
//   SPD blocks:  `strata spd` (Algorithm 1) with spd.blocks = those blocks:
//                block-to-block distillation, head grouping where sensitive
//   ladder layers and LP pairs: `strata train` from the (SPD) checkpoint
//                under the plan, only those layers trainable (the Ladder
//                paper's light retraining, LP's recovery fine-tuning)
//   skipped layers: nothing (their weights are not run)
#pragma once

#include <string>
#include <vector>

#include "model/plan.h"

namespace strata {

struct RecoveryInputs {
  LayerPlan plan;           // the chosen plan
  int tp = 2;               // its SPD degree
  int context = 256;        // the model's context (calibration windows)
  std::string checkpoint;   // the standard checkpoint (absolute)
  std::string calibration;  // the calibration text (absolute)
  std::string base_recipe;  // training data and settings (absolute)
  std::string dir;          // where the files go (absolute)
  std::string strata;       // the strata binary the script runs (absolute)
  int steps = 200;          // of the training stage
  double lr = 1e-4;
};

struct RecoveryFiles {
  std::vector<std::string> written;  // paths
  bool spd = false, train = false;   // the stages the plan needs
  std::string script;                // the script that runs them
};

// The trainable-layer patterns of a plan: "layers:a-b" for each run of
// ladder and lp layers.
std::vector<std::string> recovery_trainable(const LayerPlan& plan);

// Writes dir/spd.toml (when the plan has SPD blocks), dir/train.toml (when it
// has ladder layers or LP pairs) and dir/recover.sh.
RecoveryFiles write_recovery(const RecoveryInputs& in);

}  // namespace strata
