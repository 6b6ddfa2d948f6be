// AdamW over the model's parameter arena, with global-norm gradient clipping.
// Moments live in two arenas with the parameter layout (so they checkpoint
// tensor by tensor). Weight decay applies to matrices (embedding, projections,
// head), not to norm weights or biases.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"
#include "ops/backend.h"

namespace strata {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables clipping
};

template <typename T>
class AdamW {
 public:
  AdamW(ops::Backend<T>& be, const ParamLayout& layout, const AdamWConfig& cfg);

  // Clips `grads` to the global norm (if configured), then updates `params`
  // with learning rate `lr`. Returns the gradient norm before clipping.
  double step(T* params, T* grads, double lr);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  T* exp_avg() { return m_.data(); }
  T* exp_avg_sq() { return v_.data(); }
  const AdamWConfig& config() const { return cfg_; }

 private:
  ops::Backend<T>& be_;
  const ParamLayout& layout_;
  AdamWConfig cfg_;
  ops::DeviceBuffer<T> m_, v_;
  int64_t step_ = 0;
};

}  // namespace strata
