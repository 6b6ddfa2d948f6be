// The inside of `strata train` (train/trainer.cpp), split by concern:
//   train_config.cpp  the recipe into typed sections (train_config.h)
//   run_setup.cpp     the set-up in order: grid, source checkpoint, model,
//                     optimizer, run directory, data, resumed state
//   setup_model.cpp   the model: its shape, plan, memory check, weights
//   setup_state.cpp   the trainable mask, the optimizer, a resumed state
//   setup_data.cpp    the datasets and loaders
//   step.cpp          one optimizer step (StepRunner) and its data-parallel
//                     strategy (replicated, ZeRO-1, ZeRO-2/3)
//   run_io.cpp        validation, benchmark tasks, checkpoints, metrics.jsonl
//   progress.cpp      the logging window, the stop agreement, the end of a run
//   trainer.cpp       the step loop
//   dry_run.cpp       --dry-run and the layout planner
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
#include "io/checkpoint.h"
#include "io/model_io.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/stage_runner.h"
#include "model/zero.h"
#include "parallel/grid.h"
#include "parallel/timed_comm.h"
#include "train/optimizer.h"
#include "train/train_config.h"

namespace strata::train_internal {

// Where the weights come from: a checkpoint of this run (resume), another
// run's (init_from), or none (a fresh initialisation).
struct Source {
  std::string resume;     // "" unless resuming
  std::string init_from;  // "" unless starting from another run's checkpoint
  std::unique_ptr<CheckpointReader> reader;
  CheckpointInfo info;
  const std::string& path() const { return resume.empty() ? init_from : resume; }
};

// Everything a run needs, set up from the recipe before the first step.
struct Run {
  const TrainConfig& c;
  DirLock dir_lock;  // rank 0: one writer per run directory, for the run's life
  std::unique_ptr<Tokenizer> tokenizer;
  // Parallelism: the grid, and its groups wrapped to time communication
  // (before the model: its ZeRO store waits on the data-parallel group when
  // it goes).
  ProcessGrid grid;
  TimedComm* tp = nullptr;                       // owned by grid.tp_comm
  TimedComm* dp = nullptr;                       // owned by grid.dp_comm
  Communicator* pp = nullptr;                    // grid.pp_comm (pipeline stages)
  std::string device;                            // resolved run.device
  std::unique_ptr<ops::Backend<float>> backend;  // made before the grid's comms, moved into model
  std::unique_ptr<Model<float>> model;
  // Pipeline parallelism (pp > 1): the stages' first layers (pp x
  // virtual_stages + 1 entries, then L) and this rank's runner of them.
  std::vector<int> stage_first;
  std::unique_ptr<StageRunner<float>> pipe;
  bool piped() const { return pipe != nullptr; }
  std::vector<int> pp_holder;  // per tensor: the lowest pipeline rank holding it
  std::string precision;       // as resolved ("auto -> bf16")
  std::string activations;     // their storage, as resolved
  std::unique_ptr<AdamW<float>> opt;
  std::vector<bool> trainable;  // per tensor
  std::unique_ptr<Loader> train_loader;
  std::function<std::unique_ptr<Loader>()> make_val_loader;  // fresh, from the start
  int64_t step = 0, tokens_seen = 0;
  std::string metrics_path;
  std::unique_ptr<TensorBoardWriter> tb;  // rank 0, with log.tensorboard
  bool dry_run = false;                   // setup() stops after the memory check
  bool restart_data = false;              // a resume allowed to change the data: loader from 0
  std::string resume_note;                // the recipe values a resume changes, for the log
  bool plan_memory = false;               // dry run for other devices: no refusal here
  LlamaConfig planned_cfg;                // the model as set up (for the layout planner)
  LayerPlan planned_plan;
  double trained_share = 1;  // of the weights (training.freeze)
  MemoryEstimate memory;     // per process, before allocation
  int64_t runtime_rss = 0;   // resident memory just before the model was built
  MemoryLimit memory_limit;  // what was available then
  std::vector<int> owner;    // ZeRO-1: the dp rank updating each tensor (-1: frozen)
  // ZeRO-2/3: the shards of gradients, moments (and weights), owned by the
  // model (the grid outlives it: declared before the model).
  ZeroShards* zero_store = nullptr;
  bool root() const { return grid.is_root(); }
  int world() const { return grid.world_size; }
  int zero() const { return c.parallel.zero; }
  const std::string& dir() const { return c.run.dir; }

  explicit Run(const TrainConfig& config) : c(config) {}
};

// Everything before the first step (run_setup.cpp): data (prepared if
// missing), the process grid, the model (new, init_from, or resumed),
// optimizer and loaders. Throws strata::Error with one line on bad input,
// before anything is written.
void setup(Run& run);

// The parts of setup(), in the order it calls them.
void setup_grid(Run& run);                        // run_setup.cpp
Source open_source(Run& run);                     // run_setup.cpp
void setup_model(Run& run, const Source& src);    // setup_model.cpp
void setup_optimizer(Run& run);                   // setup_state.cpp
void setup_data(Run& run);                        // setup_data.cpp
void restore_state(Run& run, const Source& src);  // setup_state.cpp
void check_run_dir(Run& run, const Source& src);  // run_dir.cpp
void archive_previous_run(const Run& run);        // run_dir.cpp

// Reads tensors `tensors` of checkpoint group `group` into this rank's parts.
void read_parts(const Run& run, const CheckpointReader& reader, const std::string& group,
                const std::vector<int>& tensors, const std::function<float*(int)>& dst);

// Mean validation loss over `batches` batches (-1 without validation data).
double evaluate(Run& run, int batches);
// Benchmark tasks during training ([eval] tasks) into `record`.
void run_eval_tasks(Run& run, nlohmann::json& record);
// Writes the step's checkpoint (collective under MPI) and returns its path.
std::string save(Run& run);
// One JSON line of metrics.jsonl (rank 0).
void append_metrics(const Run& run, nlohmann::json j);

std::string human_time(double s);  // 2m05s, 1h07m

}  // namespace strata::train_internal
