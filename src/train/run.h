// The inside of `strata train` (train/trainer.cpp), split by concern:
//   run_setup.cpp  the recipe, data, grid, model, optimizer and resume -> a Run
//   run_io.cpp     validation, benchmark tasks, checkpoints, metrics.jsonl
//   trainer.cpp    the step loop
//   train_schema.cpp  the recipe keys and the trainable-mask patterns
// Internal to src/train/: the public entry points are in train/trainer.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "core/tensorboard.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/zero.h"
#include "parallel/grid.h"
#include "parallel/timed_comm.h"
#include "train/layerskip.h"
#include "train/optimizer.h"
#include "train/recipe.h"
#include "train/schedule.h"

namespace strata::train_internal {

// Everything a run needs, set up from the recipe before the first step.
struct Run {
  const Recipe& r;
  std::string dir;
  DirLock dir_lock;  // rank 0: one writer per run directory, for the run's life
  uint64_t seed = 0;
  int64_t steps = 0;
  int micro_batch = 0, seq_len = 0, accum = 0;
  LrSchedule schedule;
  std::unique_ptr<Tokenizer> tokenizer;
  // Parallelism: the grid, and its groups wrapped to time communication
  // (before the model: its ZeRO store waits on the data-parallel group when
  // it goes).
  ProcessGrid grid;
  TimedComm* tp = nullptr;  // owned by grid.tp_comm
  TimedComm* dp = nullptr;  // owned by grid.dp_comm
  std::string device;                            // resolved run.device
  std::unique_ptr<ops::Backend<float>> backend;  // made before the grid's comms, moved into model
  std::unique_ptr<Model<float>> model;
  std::unique_ptr<AdamW<float>> opt;
  std::unique_ptr<Loader> train_loader;
  std::function<std::unique_ptr<Loader>()> make_val_loader;  // fresh, from the start
  int64_t step = 0, tokens_seen = 0;
  std::string metrics_path;
  std::unique_ptr<TensorBoardWriter> tb;  // rank 0, with log.tensorboard
  bool dry_run = false;                   // setup() stops after the memory check
  bool plan_memory = false;               // dry run for other devices: no refusal here
  LlamaConfig planned_cfg;                // the model as set up (for the layout planner)
  LayerPlan planned_plan;
  Recompute planned_recompute = Recompute::None;
  double trained_share = 1;  // of the weights (training.freeze)
  MemoryEstimate memory;     // per process, before allocation
  int64_t runtime_rss = 0;   // resident memory just before the model was built
  MemoryLimit memory_limit;  // what was available then
  int zero = 0;
  LayerSkipConfig layerskip;
  std::vector<int> owner;  // ZeRO-1: the dp rank updating each tensor (-1: frozen)
  // ZeRO-2/3: the shards of gradients, moments (and weights), owned by the
  // model (the grid outlives it: declared before the model).
  ZeroShards* zero_store = nullptr;
  bool root() const { return grid.is_root(); }
  int world() const { return grid.world_size; }

  explicit Run(const Recipe& recipe) : r(recipe) {}
};

// Everything before the first step: data (prepared if missing), the process
// grid, the model (new, init_from, or resumed), optimizer and loaders. Throws
// strata::Error with one line on bad input, before anything is written.
void setup(Run& run);

// Mean validation loss over `batches` batches (-1 without validation data).
double evaluate(Run& run, int batches);
// Benchmark tasks during training ([eval] tasks) into `record`.
void run_eval_tasks(Run& run, nlohmann::json& record);
// Writes the step's checkpoint (collective under MPI) and returns its path.
std::string save(Run& run);
// One JSON line of metrics.jsonl (rank 0).
void append_metrics(const Run& run, const nlohmann::json& j);

std::string human_count(double n);
std::string human_time(double s);

}  // namespace strata::train_internal
