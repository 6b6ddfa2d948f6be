#include "train/schedule.h"

#include <cmath>

#include "core/error.h"

namespace strata {

void LrSchedule::validate() const {
  STRATA_CHECK(kind == "cosine" || kind == "linear" || kind == "constant",
               "lr_scheduler.kind: unknown schedule '", kind, "' (cosine, linear or constant)");
  STRATA_CHECK(lr >= 0 && min_lr >= 0, "learning rates must be non-negative");
  STRATA_CHECK(min_lr <= lr, "lr_scheduler.min_lr (", min_lr, ") exceeds the peak lr (", lr, ")");
  STRATA_CHECK(warmup_steps >= 0 && decay_steps >= 0, "schedule step counts must be >= 0");
}

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  if (kind == "constant") return lr;
  const int64_t span = decay_steps - warmup_steps;
  if (span <= 0) return lr;
  const double progress = std::min(1.0, double(step - warmup_steps) / double(span));
  if (kind == "linear") return lr - (lr - min_lr) * progress;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace strata
