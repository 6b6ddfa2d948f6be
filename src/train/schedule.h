// Learning-rate schedules: linear warm-up, then cosine, linear or constant
// decay to a floor.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

struct LrSchedule {
  std::string kind = "cosine";  // "cosine" | "linear" | "constant"
  double lr = 3e-4;             // peak learning rate
  double min_lr = 0.0;          // floor reached at the end of the decay
  int64_t warmup_steps = 0;     // linear ramp from lr/warmup to lr
  int64_t decay_steps = 0;      // steps from the start to the end of the decay (incl. warm-up)

  // Learning rate for optimizer step `step` (0-based). During warm-up
  // lr * (step + 1) / warmup_steps; then the decay from lr to min_lr over
  // [warmup_steps, decay_steps); min_lr afterwards.
  double at(int64_t step) const;
  // Throws strata::Error for an unknown kind or inconsistent values.
  void validate() const;
};

}  // namespace strata
