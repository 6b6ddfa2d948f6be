// A training recipe, parsed once into typed sections (the tables of the
// recipe: [run], [model], [data], [training], [optimizer], [lr_scheduler],
// [parallelism], [layerskip], [checkpoint], [eval], [log]). The schema
// (train_schema.cpp) gives every key its type, default and help; read_train_
// config() reads each section and validates it, one error naming the file,
// the line and the key (Recipe::fail). After it nothing looks a value up by
// its key: the trainer reads these fields. What can only be checked against
// the model or the data (a sequence longer than the model's context, a
// vocabulary smaller than the tokenizer's) is checked where they are known,
// and blamed on the key through fail().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/memory.h"
#include "train/layerskip.h"
#include "train/optimizer.h"
#include "train/recipe.h"
#include "train/schedule.h"

namespace strata {

struct RunSection {
  std::string name;
  std::string dir;  // resolved: runs/<name> when the recipe leaves it empty
  uint64_t seed = 0;
  int threads = 0;  // 0: OMP_NUM_THREADS or all cores
  std::string device;
};

struct ModelSection {
  std::string init_from;    // a checkpoint to start from ("": none)
  std::string config_file;  // model.config: a Hugging Face config.json ("": none)
  std::string plan;         // the layer plan as written ("": all standard, or the checkpoint's)
  bool plan_given = false;  // written in the recipe (compared with a checkpoint's)
  std::string attention = "strata";  // model.attention: strata or cudnn (checked)
  // The shape keys the recipe gives (model.hidden_size, ...), by their
  // LlamaConfig JSON names (hidden_size, ...), typed by the schema, in schema order.
  nlohmann::ordered_json shape = nlohmann::ordered_json::object();
};

enum class DataKind { Pretrain, Sft };

struct DataSection {
  DataKind kind = DataKind::Pretrain;
  std::string tokenizer;            // "": the checkpoint's
  std::string dataset;              // pretrain: the prepared token shards
  std::vector<std::string> inputs;  // raw files (globs) to prepare it from
  std::string doc_split;
  double val_fraction = 0;
  std::string sft_train, sft_val;  // SFT JSONL files
  std::string chat_template;       // SFT: a Hugging Face chat template ("": strata's own)
  bool packing = false;
};

struct TrainingSection {
  int64_t steps = 0;
  int micro_batch = 0, seq_len = 0, accum = 0;
  double grad_clip = 0;
  std::string precision;    // fp32, bf16 or auto (checked)
  std::string activations;  // their storage: fp32, bf16 or auto (checked)
  Recompute recompute = Recompute::None;
  std::vector<std::string> trainable, freeze;  // tensor patterns
};

// training.activations resolved: bf16 storage where asked, and under auto on
// device cuda (resolved) with bf16 matmuls; fp32 on the CPU under auto until
// the CPU performance work measures bf16 storage there. `bf16_matmuls`:
// before the backend exists, precision auto counts as bf16.
bool bf16_activations(const TrainingSection& t, const std::string& device, bool bf16_matmuls);
// Whether a run's GEMM engines keep bf16 copies of the weights (MemoryUse):
// bf16 matmuls on a kernel backend (precision auto counts as bf16 on cuda,
// before the backend exists, as for the activations), or on a CPU with a
// native bf16 dot product (cpu::set_held_weights).
bool bf16_weight_copies(const TrainingSection& t, const std::string& device);

struct ParallelSection {
  int tp = 1;
  int dp = 0;                             // 0: world size / tp
  bool dp_given = false;                  // written in the recipe (errors of the grid name it)
  int zero = 0;                           // ZeRO stage
  int pp = 1;                             // pipeline stages (ranks)
  std::string schedule = "1f1b";          // gpipe, 1f1b or interleaved (parallel/pipeline.h)
  int virtual_stages = 1;                 // stages per pipeline rank (interleaved)
  std::vector<int> stage_layers;          // layers per stage (empty: the planner's split)
  double collective_timeout = 1800;       // seconds (0: none), parallel/hang_watch.h
  bool collective_timeout_given = false;  // else STRATA_COLLECTIVE_TIMEOUT may set it
};

struct CheckpointSection {
  int64_t interval = 0;  // 0: only at the end
  int keep = 0;          // 0: all
  std::string resume;    // auto, none, or a path
  bool final = true;
};

struct EvalSection {
  int64_t interval = 0;
  int batches = 0;
  std::vector<std::string> tasks;
  int64_t task_limit = 0;
  int task_shots = -1;
  std::string task_dir;
  bool allow_code_execution = false;
};

struct LogSection {
  int64_t interval = 1;
  bool tensorboard = true;
  std::string sample_prompt;
  int sample_tokens = 0;
  double sample_temperature = 0;
};

struct TrainConfig {
  const Recipe* recipe = nullptr;  // where each value came from (errors), the resolved TOML
  RunSection run;
  ModelSection model;
  DataSection data;
  TrainingSection training;
  AdamWConfig optimizer;              // lr, betas, eps, weight decay; grad_clip from [training]
  bool load_optimizer_state = false;  // optimizer.load_state (with model.init_from)
  LrSchedule schedule;                // [lr_scheduler] with optimizer.lr; decay_steps resolved
  ParallelSection parallel;
  LayerSkipConfig layerskip;  // validated once the model's depth is known
  CheckpointSection checkpoint;
  EvalSection eval;
  LogSection log;

  // "<file>:<line>: <key>: <message>" (Recipe::fail): a well-typed value the
  // run cannot take, found once the model, data or devices are known.
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    recipe->fail(key, message);
  }
  std::string where(const std::string& key) const { return recipe->where(key); }
  // The recipe files read: the one named on the command line first, then its bases.
  const std::vector<std::string>& files() const { return recipe->files(); }
  const std::string& file() const { return recipe->files().front(); }
};

// Reads and validates every section of a training recipe (its schema:
// train_recipe_schema()). Throws strata::Error naming the file and key.
// The result points to `recipe`, which must outlive it.
TrainConfig read_train_config(const Recipe& recipe);

}  // namespace strata
