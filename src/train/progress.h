// The parts of the step loop around a step (run.h): the logging window, the
// validator, the checkpointer, the agreement of the ranks on a stop, and
// the end of a run. Internal to src/train/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/timer.h"
#include "train/run.h"
#include "train/step.h"
#include "train/trainer.h"

namespace strata::train_internal {

// The steps since the last log line: their mean loss and throughput, the time
// in collectives, each early exit's mean loss. Time spent evaluating or
// saving is left out of the throughput (pause()).
class MetricsWindow {
 public:
  explicit MetricsWindow(const Run& run);
  void add(const StepResult& s);
  // The log line (rank 0) and the metrics record of the window, which restarts.
  nlohmann::json flush(const StepResult& last);
  // Evaluation or a checkpoint just ran: the throughput restarts after it.
  void pause() { timer_.reset(); }
  // The whole run's throughput and time per step into r; returns the steps run.
  int64_t summarize(TrainResult& r) const;

 private:
  const Run& run_;
  Timer total_, timer_;
  int64_t first_step_ = 0;
  int64_t tokens_ = 0, run_tokens_ = 0;
  double run_wall_ = 0, run_comm_ = 0;
  double run_bubble_ = 0;  // summed over the steps after the first (pipeline)
  double loss_ = 0, comm_ = 0, wall_ = 0, grad_wait_ = 0, poll_ = 0;
  int steps_ = 0;
  std::vector<double> exit_;
  std::vector<int> exit_n_;
};

// Validation and benchmark tasks at eval.interval and at the end, into the
// step's metrics record.
class Validator {
 public:
  explicit Validator(Run& run) : run_(run) {}
  bool due(bool last) const;
  // The validation loss and the tasks' metrics of the step into `record`;
  // returns whether anything ran.
  bool run(const StepResult& s, nlohmann::json& record, TrainResult& result);

 private:
  Run& run_;
};

// Checkpoints at checkpoint.interval, at the end (checkpoint.final) and on a
// stop.
class Checkpointer {
 public:
  explicit Checkpointer(Run& run) : run_(run) {}
  bool due(bool last, bool stopping) const;
  std::string save();  // the path written

 private:
  Run& run_;
};

// A stop signal (SIGINT, SIGTERM) agreed by every rank after each step, so
// that all stop at the same step and take part in the final checkpoint (a
// signal may reach them at different times). 0: go on.
int agree_on_stop(const Run& run);

// What the run did, printed at its end (time per step, ZeRO traffic, memory
// against the estimate), then the sample of log.sample_prompt and the last
// line.
void finish_run(Run& run, const DataParallel& dp, const MetricsWindow& window, TrainResult& result);

}  // namespace strata::train_internal
