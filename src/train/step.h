// One optimizer step of `strata train` (run.h): the micro-batches' forward
// and backward (with LayerSkip's masks and exit losses), the data-parallel
// strategy that combines the ranks' gradients, and the optimizer. Internal
// to src/train/.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "train/run.h"

namespace strata::train_internal {

// The environment's debug and measurement switches, read once.
struct DebugSwitches {
  bool zero_prefetch = true;     // STRATA_ZERO_PREFETCH=0: no ZeRO-3 gather ahead of its unit
  bool progress_polls = true;    // STRATA_PROGRESS_POLLS=0: no polls of the collectives in flight
  bool layerskip_masks = false;  // STRATA_DEBUG_LAYERSKIP: every rank prints its masks' digests
  // STRATA_DEBUG_DP_WAIT: a barrier before the gradient waits, and per rank
  // and step the time in it (the ranks' imbalance), the waits after it (the
  // all-reduces' own tail) and the polls (docs/distributed.md, "Cost of
  // communication").
  bool dp_wait = false;
  static DebugSwitches from_env();
};

// What one step did.
struct StepResult {
  double loss = 0;   // mean over the step's global batch
  double gnorm = 0;  // before clipping
  double lr = 0;
  int64_t tokens = 0;  // over every data-parallel rank
  // Seconds: the step's wall time, of which waiting in collectives, of which
  // the data-parallel gradient waits and polls.
  double wall = 0, comm = 0, grad_wait = 0, poll = 0;
  // Early exits: the step's mean loss at each exit l (0-based layer) that had
  // one; exit_on[l] false for the others.
  // Pipeline parallelism: the share of the stages' time in the schedule
  // spent waiting for each other (the measured bubble; mean over the ranks).
  double bubble = 0;
  std::vector<double> exit_loss;
  std::vector<bool> exit_on;
};

// How the data-parallel ranks' gradients come together and the optimizer
// steps: replicated (each bucket all-reduced as backward finishes it),
// ZeRO-1 (the same, each tensor's update then broadcast by its owner) or
// ZeRO-2/3 (the weight store reduce-scatters buckets; a sharded AdamW step).
class DataParallel {
 public:
  virtual ~DataParallel() = default;
  // Before micro-batch i of n (the last one's backward reduces).
  virtual void before_micro_batch(size_t i, size_t n) = 0;
  // After the last backward: this rank's gradients are final.
  virtual void finish_gradients() = 0;
  // The optimizer step over the final gradients; returns the gradient norm.
  virtual double optimizer_step(double lr) = 0;
  // After a finite step: what the other ranks need of this rank's update.
  virtual void publish() {}
  // What it moved, at the end of the run.
  virtual void report(int64_t steps_run) const { (void)steps_run; }
};
std::unique_ptr<DataParallel> make_data_parallel(Run& run, const DebugSwitches& debug);

// Runs the steps of a Run, one at a time.
class StepRunner {
 public:
  StepRunner(Run& run, const DebugSwitches& debug);
  // Step run.step (0-based) at learning rate lr: increments run.step and
  // run.tokens_seen. A non-finite loss or gradient norm stops the run in one
  // line (the update is not applied).
  StepResult run_step(double lr);
  const DataParallel& data_parallel() const { return *dp_; }

 private:
  // The micro-batch's LayerSkip masks and exit weights (global sample indices).
  LayerSkipStep layerskip(size_t i, const Batch& b, const std::vector<double>& exit_weight) const;
  void whole_micro_batches(int64_t n_valid, const std::vector<double>& exit_weight,
                           double& loss_sum, std::vector<double>& exit_sum,
                           std::vector<bool>& exit_on);
  double pipeline_micro_batches(int64_t n_valid, const std::vector<double>& exit_weight,
                                double& loss_sum, std::vector<double>& exit_sum,
                                std::vector<bool>& exit_on);
  Run& run_;
  DebugSwitches debug_;
  std::unique_ptr<DataParallel> dp_;
  std::vector<Batch> micro_;
};

}  // namespace strata::train_internal
