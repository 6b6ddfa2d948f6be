// `strata train`: the step loop over a Run set up by run_setup.cpp (run.h).
// A step (step.cpp), then around it the logging window, validation,
// checkpoints and the stop agreement (progress.cpp).
#include "train/trainer.h"

#include "core/log.h"
#include "core/signals.h"
#include "core/threads.h"
#include "train/progress.h"
#include "train/run.h"
#include "train/step.h"

namespace strata {
using namespace train_internal;

TrainResult train(const Recipe& recipe) {
  const TrainConfig config = read_train_config(recipe);
  Run run(config);
  setup(run);
  const TrainingSection& t = config.training;
  TrainResult result;
  result.run_dir = run.dir();
  log::info("train: run '", config.run.name, "' in ", run.dir(), ": steps ", run.step, " -> ",
            t.steps, ", ", t.micro_batch, " x ", t.seq_len, " tokens x ", t.accum,
            " accumulation, ", num_threads(), " threads, device ", run.device);
  StopScope stop_scope;  // SIGINT / SIGTERM: finish the step, save, return
  StepRunner steps(run, DebugSwitches::from_env());
  MetricsWindow window(run);
  Validator validator(run);
  Checkpointer checkpointer(run);
  while (run.step < t.steps) {
    const StepResult s = steps.run_step(config.schedule.at(run.step));
    window.add(s);
    result.losses.push_back(s.loss);
    result.last_loss = s.loss;
    const bool last = run.step == t.steps;
    const int stop = agree_on_stop(run);  // every rank stops at the same step
    nlohmann::json record;
    if (run.step % config.log.interval == 0 || last || stop) record = window.flush(s);
    if (validator.due(last) && validator.run(s, record, result)) window.pause();
    if (!record.is_null()) append_metrics(run, record);
    if (checkpointer.due(last, stop != 0)) {
      result.last_checkpoint = checkpointer.save();
      window.pause();
    }
    if (stop) {
      result.stop_signal = stop;
      log::info("stopped by signal ", stop, " after step ", run.step,
                "; run the same command to resume");
      result.interrupted = true;
      break;
    }
  }
  finish_run(run, steps.data_parallel(), window, result);
  return result;
}

}  // namespace strata
